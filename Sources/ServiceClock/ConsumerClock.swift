import Foundation

/// The time a queue consumer and the periodic tasks (`Periodic`) run on, injected: the hold
/// breaker, the probe schedule, the shutdown deadline and a job's timings read `now`; the times written into messages (a dead
/// letter's `x-apns-failed-at`, a retry's) and compared with publish times read `wallTime`.
/// Production runs on `SystemConsumerClock`; tests move a manual clock, so a 30-second deadline
/// or a 5-second probe interval is tested in no time, and nothing in a consumer or its stages
/// reads the time itself.
public protocol ConsumerClock: Sendable {
    var now: ContinuousClock.Instant { get }
    /// The wall-clock time.
    var wallTime: Date { get }
    /// Returns after `duration` on this clock; throws `CancellationError` when the task is cancelled first.
    func sleep(for duration: Duration) async throws
}

/// `ContinuousClock` and the system's wall clock, the production clock of every consumer.
public struct SystemConsumerClock: ConsumerClock {
    public init() {}
    public var now: ContinuousClock.Instant { .now }
    public var wallTime: Date { Date() }
    public func sleep(for duration: Duration) async throws { try await Task.sleep(for: duration) }
}
