/// A delivery event from `apns.events` (contract §8) as the sync server receives it, and its
/// parser. The client's own type, as `FeedbackEvent` is: the worker writes the event with
/// `APNSModel`'s, and a sync server links this module alone. Pure: the body is hostile input
/// (anyone with publish rights on the exchange can send anything), so a body that is not an
/// event is nil, never a crash.
import APNSModel
import Foundation

/// What became of one job the sync server asked about.
public struct DeliveryEvent: Sendable, Hashable {
    /// The end the job reached, as the routing key spells it.
    public enum End: String, Sendable, Hashable, CaseIterable {
        /// Apple accepted it.
        case delivered
        /// Apple called its token (or broadcast channel) invalid: prune it (`apns.feedback` says so too).
        case invalidToken
        /// It will not be delivered as it is: log it with its reason, never publish it again as it was.
        case dead
        /// A retry was scheduled (only with `events = all`).
        case retried
    }

    /// What the job was for.
    public enum Target: Sendable, Hashable {
        case token(String)
        case channel(String)
    }

    public var jobID: String
    public var bundleID: String
    public var end: End
    /// Apple's reason or the worker's (`MalformedJob`, `RetriesExhausted`, `PayloadTooLarge`…); nil when delivered.
    public var reason: String?
    /// Apple's HTTP status (the binary API's status code; 0 when Apple was not asked).
    public var status: Int
    /// The `apns-id` Apple answered with.
    public var apnsID: String?
    /// Apple's `apns-unique-id` (development environment only), for its delivery log.
    public var apnsUniqueID: String?
    /// Attempts at Apple so far, this one included.
    public var attempts: Int
    /// When the end was reached.
    public var at: Date
    /// Nil for a job whose body the worker could not read.
    public var target: Target?
    /// `production` or `sandbox`, as sent.
    public var environment: String
    /// The group job that produced it (contract §6), if one did.
    public var groupJobID: String?

    /// The event in `body`, or nil when it is not one.
    public static func parse(_ body: [UInt8]) -> DeliveryEvent? {
        guard body.count <= DeliveryEvents.maxBodyBytes, let wire = try? JSONDecoder().decode(Wire.self, from: Data(body)),
            let end = End(rawValue: wire.end), let at = RFC3339.date(from: wire.at), wire.token == nil || wire.channel == nil
        else { return nil }
        let target: Target?
        if let channel = wire.channel {
            target = .channel(channel)
        } else if let token = wire.token, !token.isEmpty {
            target = .token(token)
        } else {
            target = nil
        }
        return DeliveryEvent(
            jobID: wire.jobId, bundleID: wire.bundleId, end: end, reason: wire.reason, status: wire.status, apnsID: wire.apnsId,
            apnsUniqueID: wire.apnsUniqueId, attempts: wire.attempts, at: at, target: target, environment: wire.environment,
            groupJobID: wire.groupJobId)
    }

    /// The members as the worker writes them.
    private struct Wire: Decodable {
        var jobId: String
        var bundleId: String
        var end: String
        var reason: String?
        var status: Int
        var apnsId: String?
        var apnsUniqueId: String?
        var attempts: Int
        var at: String
        var token: String?
        var channel: String?
        var environment: String
        var groupJobId: String?
    }
}
