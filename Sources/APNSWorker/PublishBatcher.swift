/// When a bundle's settles that publish (a route's message, a delivery event) go to the broker,
/// with no IO and no timer: they gather into one batch, published as one command and confirmed
/// as one resumption (`BundlePipeline+Publishing.swift`).
///
/// The first settle of a batch asks for a flush, which runs on the settle runner's next turn and
/// takes whatever has gathered by then: the end of the current burst. Under light load that is
/// the one settle, at once (no latency added); under load, the settles that came while the flush
/// waited for its turn. A batch that reaches `limit` goes at once, and the flush already asked
/// for takes what comes after it.
struct PublishBatcher<Entry> {
    /// What `add` asks of the caller.
    enum Added {
        /// Nothing: a flush already asked for will take it.
        case gathered
        /// Ask for a flush, which will `take` the batch when it runs.
        case flushOnNextTurn
        /// This batch is full: publish it now.
        case flush([Entry])
    }

    /// The most settles in one batch.
    let limit: Int
    private(set) var gathered: [Entry] = []
    /// A flush was asked for and has not taken the batch yet.
    private(set) var flushAsked = false

    init(limit: Int) {
        precondition(limit > 0)
        self.limit = limit
    }

    mutating func add(_ entry: Entry) -> Added {
        gathered.append(entry)
        if gathered.count >= limit {
            defer { gathered = [] }
            return .flush(gathered)
        }
        guard !flushAsked else { return .gathered }
        flushAsked = true
        return .flushOnNextTurn
    }

    /// The flush asked for runs: the batch gathered so far (empty when a full batch went first).
    mutating func take() -> [Entry] {
        flushAsked = false
        defer { gathered = [] }
        return gathered
    }
}
