/// Where the owner thread connects next and how long it waits first, as a value with no IO:
/// the failover list in order, the capped exponential backoff with jitter of `AMQPBackoff`
/// (from the first attempt again only after a connection that stayed established for
/// `stableAfter`), and the rule of `AMQPConnection.connect`: before any connection succeeded,
/// give up once every URL failed.
struct ReconnectPolicy {
    enum AfterFailure: Equatable {
        /// Never connected, and every URL of the list failed once: `connect` throws.
        case giveUp
        /// Try `urlIndex` after this long.
        case retry(after: Duration)
    }

    /// How long a connection must have stayed established for its loss to start the backoff
    /// over. A login alone is not enough: a node that cannot yet form a quorum queue's Raft group
    /// accepts the login and then closes the connection on the declaration (541
    /// `cluster_not_formed`); starting over at each login had every client declare again twice a
    /// second, and that load kept a busy node from ever forming the group.
    static let stableAfter: Duration = .seconds(10)

    let urlCount: Int
    let backoff: AMQPBackoff
    /// The URL of the failover list to connect to now.
    private(set) var urlIndex = 0
    /// A connection was fully established (topology and consumers restored) at least once.
    private(set) var everConnected = false
    private var attempt = 0
    private var failuresBeforeFirstConnect = 0
    /// When the current connection was established; nil while there is none.
    private var establishedAt: ContinuousClock.Instant?

    init(urlCount: Int, backoff: AMQPBackoff) {
        precondition(urlCount > 0, "no URL to connect to")
        self.urlCount = urlCount
        self.backoff = backoff
    }

    /// Topology and consumers restored at `now`: from now on a loss is repaired, never given up.
    mutating func established(at now: ContinuousClock.Instant) {
        everConnected = true
        establishedAt = now
    }

    /// The connection failed at `now` (to open, to restore, or later): what to do next.
    mutating func failed(at now: ContinuousClock.Instant, using generator: inout some RandomNumberGenerator) -> AfterFailure {
        if let since = establishedAt, since.duration(to: now) >= Self.stableAfter { attempt = 0 }
        establishedAt = nil
        if !everConnected {
            failuresBeforeFirstConnect += 1
            if failuresBeforeFirstConnect >= urlCount { return .giveUp }
        }
        urlIndex = (urlIndex + 1) % urlCount
        defer { attempt += 1 }
        return .retry(after: backoff.delay(attempt: attempt, using: &generator))
    }
}
