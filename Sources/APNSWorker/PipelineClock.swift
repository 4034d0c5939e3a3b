/// The time a pipeline's decisions run on (the hold breaker, the probe schedule, the shutdown
/// deadline): the continuous clock in production, a clock the test moves in the pipeline's tests,
/// so a 30-second deadline or a 5-second probe interval is tested in no time.
public protocol PipelineClock: Sendable {
    var now: ContinuousClock.Instant { get }
    /// Returns after `duration` on this clock; throws `CancellationError` when the task is cancelled first.
    func sleep(for duration: Duration) async throws
}

/// `ContinuousClock`, the production clock of every pipeline.
public struct SystemPipelineClock: PipelineClock {
    public init() {}
    public var now: ContinuousClock.Instant { .now }
    public func sleep(for duration: Duration) async throws { try await Task.sleep(for: duration) }
}
