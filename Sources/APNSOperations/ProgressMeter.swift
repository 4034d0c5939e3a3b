/// How far a long requeue or purge has got, and the one-line summary of it that the CLI redraws
/// on a terminal: counts and rate, drawn at most every `interval` so a fast move of thousands of
/// jobs does not spend its time writing to the terminal. Pure values, no IO.

/// How far a requeue or purge has got.
public struct OperationProgress: Sendable, Hashable {
    /// Jobs moved or dropped so far.
    public var settled: Int
    /// Messages looked at so far, selected or not.
    public var examined: Int
    /// Messages ready in the queues in scope when the operation started.
    public var total: Int

    public init(settled: Int, examined: Int, total: Int) {
        self.settled = settled
        self.examined = examined
        self.total = total
    }
}

/// Receives `OperationProgress` as a requeue or purge goes (from the task doing it).
public typealias OperationProgressHandler = @Sendable (OperationProgress) -> Void

/// Decides when to redraw the progress line and what it says.
public struct ProgressMeter: Sendable {
    /// "requeued", "purged".
    public let verb: String
    public let interval: Duration
    private let start: ContinuousClock.Instant
    private var lastDrawn: ContinuousClock.Instant?

    public init(verb: String, start: ContinuousClock.Instant, interval: Duration = .milliseconds(200)) {
        self.verb = verb
        self.start = start
        self.interval = interval
    }

    /// The line to draw for `progress` at `now`, or nil when one was drawn less than `interval`
    /// ago. The first update and the `final` one are always drawn.
    public mutating func line(_ progress: OperationProgress, at now: ContinuousClock.Instant, final: Bool = false) -> String? {
        if !final, let lastDrawn, lastDrawn.duration(to: now) < interval { return nil }
        lastDrawn = now
        return Self.format(progress, verb: verb, elapsed: start.duration(to: now))
    }

    /// "requeued 1200 job(s), 3000 of 5000 examined (60%), 830/s".
    public static func format(_ progress: OperationProgress, verb: String, elapsed: Duration) -> String {
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = seconds > 0 ? Int((Double(progress.settled) / seconds).rounded()) : 0
        // A queue can fill while it is read: never show more than 100 %.
        let percent = progress.total > 0 ? min(100, progress.examined * 100 / progress.total) : 100
        return "\(verb) \(progress.settled) job(s), \(progress.examined) of \(progress.total) examined (\(percent)%), \(rate)/s"
    }
}
