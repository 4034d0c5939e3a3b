/// The reconnect delays of the APNs transports' connection loops, as a value so both transports
/// wait the same way and the rule is tested without sockets.

/// A connection that was useful is replaced after `initial` (a floor, so a peer that accepts and
/// drops cannot spin us); each failed or useless one doubles the wait, up to `maximum`.
public struct ReconnectBackoff: Sendable, Hashable {
    public let initial: Duration
    public let maximum: Duration
    private var next: Duration

    public init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
        self.next = initial
    }

    /// How long to wait before the next attempt, after a connection that was (or was not) useful.
    public mutating func delay(afterUsefulConnection useful: Bool) -> Duration {
        if useful {
            next = initial
            return initial
        }
        let delay = next
        next = min(next * 2, maximum)
        return delay
    }
}
