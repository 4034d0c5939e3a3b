/// Where the owner thread connects next and how long it waits first, as a value with no IO:
/// the failover list in order, the capped exponential backoff with jitter of `AMQPBackoff`
/// (from the first attempt again after each connection that opened), and the rule of
/// `AMQPConnection.connect`: before any connection succeeded, give up once every URL failed.
struct ReconnectPolicy {
    enum AfterFailure: Equatable {
        /// Never connected, and every URL of the list failed once: `connect` throws.
        case giveUp
        /// Try `urlIndex` after this long.
        case retry(after: Duration)
    }

    let urlCount: Int
    let backoff: AMQPBackoff
    /// The URL of the failover list to connect to now.
    private(set) var urlIndex = 0
    /// A connection was fully established (topology and consumers restored) at least once.
    private(set) var everConnected = false
    private var attempt = 0
    private var failuresBeforeFirstConnect = 0

    init(urlCount: Int, backoff: AMQPBackoff) {
        precondition(urlCount > 0, "no URL to connect to")
        self.urlCount = urlCount
        self.backoff = backoff
    }

    /// The socket opened and the login succeeded: the backoff starts over.
    mutating func opened() {
        attempt = 0
    }

    /// Topology and consumers restored: from now on a loss is repaired, never given up.
    mutating func established() {
        everConnected = true
    }

    /// The connection failed (to open, or later): what to do next.
    mutating func failed(using generator: inout some RandomNumberGenerator) -> AfterFailure {
        if !everConnected {
            failuresBeforeFirstConnect += 1
            if failuresBeforeFirstConnect >= urlCount { return .giveUp }
        }
        urlIndex = (urlIndex + 1) % urlCount
        defer { attempt += 1 }
        return .retry(after: backoff.delay(attempt: attempt, using: &generator))
    }
}
