import APNSJSON
import Foundation

/// Which delivery events a sender wants (contract §8): `[apns "…"] events` for a bundle, the
/// job's `events` field for one job (it wins).
public enum DeliveryEventLevel: String, Sendable, Hashable, CaseIterable {
    /// No event at all: the default, and the worker's cost unchanged.
    case none
    /// One event per end reached: delivered, invalid token, dead.
    case ends
    /// The ends, and one event each time a retry is scheduled.
    case all

    /// Whether a job at this level produces an event when it reaches `end`.
    public func wants(_ end: DeliveryEvent.End) -> Bool {
        switch self {
        case .none: false
        case .ends: end != .retried
        case .all: true
        }
    }
}

/// One delivery event (contract §8): what became of a job, published on `apns.events` with
/// routing key `<bundleID>.<end>` and `message_id` `<jobId>.<end>.<attempt>` (a consumer drops
/// a repeat by it). Pure, and written only: the worker builds it and writes its body
/// (`jsonBytes`); the client's `DeliveryEvent.parse` is the one reader, `apns-worker events`'
/// too.
public struct DeliveryEvent: Sendable, Hashable {
    /// The end a job reached, as the routing key and the body spell it.
    public enum End: String, Sendable, Hashable, CaseIterable {
        case delivered
        case invalidToken
        case dead
        case retried

        /// The event's end for a job's end; nil for the ends that are no end of contract §4
        /// (held, gated, the registry's group ends).
        public init?(_ end: JobEnd) {
            switch end {
            case .delivered: self = .delivered
            case .invalidToken: self = .invalidToken
            case .dead: self = .dead
            case .retry: self = .retried
            case .held, .gated, .fannedOut, .coalesced, .trailing: return nil
            }
        }
    }

    public var jobId: String
    public var bundleId: String
    public var end: End
    /// Apple's reason or the worker's; nil when delivered.
    public var reason: String?
    /// Apple's HTTP status, the binary API's status code, 0 when Apple was not asked.
    public var status: Int
    public var apnsId: String?
    /// `apns-unique-id`, which Apple sends in its development environment only.
    public var apnsUniqueId: String?
    /// Attempts at Apple so far, this one included (0 when Apple was never asked).
    public var attempts: Int
    /// RFC 3339, when the end was reached.
    public var at: String
    /// Exactly one of `token` and `channel` is set; both nil only for a job whose body could not be read.
    public var token: String?
    public var channel: String?
    public var environment: APNSEnvironment
    /// Set only for a job a group job produced (contract §6).
    public var groupJobId: String?

    public init(
        jobId: String, bundleId: String, end: End, reason: String?, status: Int, apnsId: String?, apnsUniqueId: String?,
        attempts: Int, at: Date, target: PushTarget?, environment: APNSEnvironment, groupJobId: String?
    ) {
        self.jobId = jobId
        self.bundleId = bundleId
        self.end = end
        self.reason = reason
        self.status = status
        self.apnsId = apnsId
        self.apnsUniqueId = apnsUniqueId
        self.attempts = attempts
        self.at = RFC3339.string(from: at)
        switch target {
        case .device(let token)?: self.token = token.hex
        case .channel(let channel)?: self.channel = channel.id
        case nil: self.token = nil
        }
        self.environment = environment
        self.groupJobId = groupJobId
    }

    /// `<bundleID>.<end>`.
    public var routingKey: String { Self.routingKey(bundleID: bundleId, end: end) }

    public static func routingKey(bundleID: String, end: End) -> String { "\(bundleID).\(end.rawValue)" }

    /// `<jobId>.<end>.<attempts>`: the same for a repeat of the same event, different for each
    /// retry of a job.
    public var messageID: String { "\(jobId).\(end.rawValue).\(attempts)" }

    /// The body of contract §8: every key present (`null` where there is no value), keys sorted;
    /// `token` or `channel` as the job had, `groupJobId` only for a job a group job produced.
    /// Written in one pass (one per job with events on), the keys in their byte order by hand.
    public func jsonBytes() -> [UInt8] {
        var json = FlatJSON.Writer(capacity: 400)
        json.member("apnsId", apnsId)
        json.member("apnsUniqueId", apnsUniqueId)
        json.member("at", at)
        json.member("attempts", attempts)
        json.member("bundleId", bundleId)
        if let channel { json.member("channel", channel) }
        json.member("end", end.rawValue)
        json.member("environment", environment.rawValue)
        if let groupJobId { json.member("groupJobId", groupJobId) }
        json.member("jobId", jobId)
        json.member("reason", reason)
        json.member("status", status)
        if channel == nil { json.member("token", token ?? "") }
        return json.finish()
    }
}
