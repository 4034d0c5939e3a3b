/// The operations of one inspector that take messages (listings, `show`, moves, purges), one
/// at a time, in the order they asked: RabbitMQ has no peek, so a listing holds the messages it
/// reads until its session closes and they are back in their queue, and an operation beside it
/// sees none of them. Four admin page requests at once, over a dead queue of 60 jobs of 2 MiB,
/// each showed "No dead jobs." (alone, the page lists all 60): the messages were spread over
/// four consumers, each waiting for the rest. Reads that take nothing (depths) do not wait.
actor OperationTurns {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    /// Waits for the turn. Not cancellable: a request that goes away while it waits takes its
    /// turn and gives it up at once (its operation sees the cancellation).
    func take() async {
        guard busy else {
            busy = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    /// Hands the turn to the next operation that waits for it.
    func give() {
        if waiting.isEmpty {
            busy = false
        } else {
            waiting.removeFirst().resume()
        }
    }
}
