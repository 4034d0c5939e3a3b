/// The retry schedule of contract §3/§4: a list of backoff delays and a cap on attempts.
///
/// Attempts count sends to APNs that ended in a retryable outcome; a job carries the count in
/// its `x-apns-attempt` header between attempts. Held jobs (provider faults) do not count.
public struct RetryPolicy: Sendable, Hashable {
    /// Backoff before attempt 2, 3, …; the last delay repeats when attempts outnumber delays.
    public var delays: [Duration]
    /// Attempts in all, the first included; after this many the job is dead (`RetriesExhausted`).
    public var maxAttempts: Int

    public init(delays: [Duration], maxAttempts: Int) {
        precondition(!delays.isEmpty, "a retry policy needs at least one delay")
        precondition(maxAttempts >= 1, "maxAttempts counts the first attempt, so it is at least 1")
        self.delays = delays
        self.maxAttempts = maxAttempts
    }

    /// The contract's example: 10s, 1m, 5m, 15m, 15m and 6 attempts.
    public static let standard = RetryPolicy(
        delays: [.seconds(10), .seconds(60), .seconds(300), .seconds(900), .seconds(900)], maxAttempts: 6)

    /// How long to wait (in the retry queue for that delay) after attempt number `attemptsMade`
    /// (1 for the first send) failed retryably; nil when no attempt is left (the job's end is
    /// then `dead`, `RetriesExhausted`: `OutcomeRouter` decides the end, not the policy).
    public func delay(afterAttempt attemptsMade: Int) -> Duration? {
        guard attemptsMade < maxAttempts else { return nil }
        let index = min(max(attemptsMade - 1, 0), delays.count - 1)
        return delays[index]
    }
}
