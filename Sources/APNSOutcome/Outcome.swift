/// Where a job ends (contract §4). `OutcomeClassifier` maps a `TransportResult` to one of these;
/// the worker carries it out.
public enum Outcome: Sendable, Hashable {
    /// APNs accepted the notification: ack the job.
    case delivered
    /// The device token is dead, or the broadcast channel is unknown or invalid (contract §7):
    /// publish a feedback event (naming the token or the channel), then ack.
    /// `reason` is Apple's (or `InvalidToken` for binary status 8); `timestamp` is ms since epoch.
    case invalidToken(reason: String, timestamp: Int64?)
    /// Try again later with the next backoff delay. `status` is Apple's HTTP status or binary
    /// status code, 0 when Apple never answered.
    case retry(reason: String, status: Int)
    /// Will never succeed without a person: dead-letter with these headers.
    case dead(reason: String, status: Int, detail: String)
    /// The provider's own credentials or topic are wrong: pause the bundle, keep the job.
    /// `ExpiredProviderToken` ends here too: the transport has already renewed the token and
    /// sent again, so a second refusal is the provider's fault (contract §4).
    case held(reason: String, status: Int)
}
