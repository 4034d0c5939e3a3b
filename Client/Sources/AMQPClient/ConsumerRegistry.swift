/// The consumers of one connection, as a value with no IO: which are wanted (they outlive
/// connections and are started again on each), on which channel each runs now (a channel's
/// consumer is its newest: one that replaces another takes its channel and the old entry is
/// forgotten, `ConnectionDriver.retire`), and which were
/// cancelled (kept while the connection lasts, so deliveries in hand can still be acked on their
/// channel, and forgotten at the next one). `Request` is what the driver needs to start one.
struct ConsumerRegistry<Request> {
    struct Entry {
        var request: Request
        /// The channel it consumes on now; nil until started on this connection.
        var channel: UInt16?
        /// After `cancel()`: no longer restored; its channel stays open for acks.
        var cancelled = false
    }

    private(set) var entries: [Int: Entry] = [:]
    private var byChannel: [UInt16: Int] = [:]

    /// A consumer the caller asked for (started now, or with the next connection).
    mutating func add(_ id: Int, _ request: Request) {
        entries[id] = Entry(request: request)
    }

    /// Forgets a consumer entirely (it failed to start, or the broker cancelled it).
    @discardableResult
    mutating func remove(_ id: Int) -> Request? {
        guard let entry = entries.removeValue(forKey: id) else { return nil }
        if let channel = entry.channel, byChannel[channel] == id { byChannel[channel] = nil }
        return entry.request
    }

    func entry(_ id: Int) -> Entry? { entries[id] }

    /// The consumer delivering on `channel`, if any.
    func consumer(on channel: UInt16) -> (id: Int, entry: Entry)? {
        guard let id = byChannel[channel], let entry = entries[id] else { return nil }
        return (id, entry)
    }

    /// The broker confirmed `basic.consume` on `channel`.
    mutating func started(_ id: Int, on channel: UInt16) {
        guard entries[id] != nil else { return }
        entries[id]?.channel = channel
        byChannel[channel] = id
    }

    /// The caller cancelled the consumer: returns it if it was not cancelled already (its
    /// channel, if any, is where `basic.cancel` goes).
    mutating func cancel(_ id: Int) -> Entry? {
        guard let entry = entries[id], !entry.cancelled else { return nil }
        entries[id]?.cancelled = true
        return entry
    }

    /// `channel` closed: the consumer on it, now without a channel.
    mutating func channelClosed(_ channel: UInt16) -> (id: Int, entry: Entry)? {
        guard let id = byChannel.removeValue(forKey: channel), let entry = entries[id] else { return nil }
        entries[id]?.channel = nil
        return (id, entries[id] ?? entry)
    }

    /// The connection died: no consumer has a channel any more.
    mutating func connectionLost() {
        byChannel.removeAll()
        for id in entries.keys { entries[id]?.channel = nil }
    }

    /// The consumers not cancelled, in the order they were asked for.
    var liveIDs: [Int] { entries.filter { !$0.value.cancelled }.keys.sorted() }

    /// A new connection: the cancelled consumers are forgotten; the others, in the order they
    /// were asked for, are to be started again.
    mutating func toRestore() -> [Int] {
        for (id, entry) in entries where entry.cancelled { remove(id) }
        return entries.keys.sorted()
    }

    /// The connection is closed for good: every consumer, forgotten.
    mutating func removeAll() -> [Request] {
        defer {
            entries.removeAll()
            byChannel.removeAll()
        }
        return entries.keys.sorted().map { entries[$0]!.request }
    }
}
