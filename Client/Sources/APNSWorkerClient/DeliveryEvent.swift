/// A delivery event from `apns.events` (contract §8) as the sync server receives it, and its
/// parser. The client's own type, as `FeedbackEvent` is: the worker writes the event with
/// `APNSModel`'s, and a sync server links this module alone. Pure: the body is hostile input
/// (anyone with publish rights on the exchange can send anything), so a body that is not an
/// event is nil, never a crash.
import APNSJSON
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

    /// The event in `body`, or nil when it is not one: exactly what
    /// docs/schemas/delivery-event.schema.json accepts (ContractCorpusTests runs both over the same
    /// corpus), bar what JSON Schema cannot see (a key twice, nesting over 64 levels, a body over
    /// `DeliveryEvents.maxBodyBytes`).
    public static func parse(_ body: [UInt8]) -> DeliveryEvent? {
        try? parseOrThrow(body)
    }

    /// The event in `body`, or why it is not one (`apns-worker events` shows the operator why).
    public static func parseOrThrow(_ body: [UInt8]) throws(MalformedFeedback) -> DeliveryEvent {
        let fields = try EventFields(body, maxBodyBytes: DeliveryEvents.maxBodyBytes)
        func uuid(_ value: JSONValue) -> String? { value.stringValue.flatMap { JobParser.canonicalUUID($0) != nil ? $0 : nil } }
        func count(_ value: JSONValue) -> Int? { value.wholeNumberValue.flatMap { (0...Int64(Int32.max)).contains($0) ? Int($0) : nil } }
        let jobID = try fields.required("jobId", "a canonical UUID", uuid)
        let bundleID = try fields.bundleID()
        let end = try fields.required("end", "delivered, invalidToken, dead or retried") { $0.stringValue.flatMap(End.init(rawValue:)) }
        let reason = try fields.nullable("reason", "1 to 1024 bytes without control characters") { $0.stringValue.flatMap { EventFields.isReason($0) ? $0 : nil } }
        let status = try fields.required("status", "an integer from 0 to 2^31−1", count)
        let apnsID = try fields.nullable("apnsId", "a string", \.stringValue)
        let apnsUniqueID = try fields.nullable("apnsUniqueId", "a string", \.stringValue)
        let attempts = try fields.required("attempts", "an integer from 0 to 2^31−1", count)
        let at = try fields.required("at", "an RFC 3339 date-time") { $0.stringValue.flatMap(RFC3339.date(from:)) }
        let environment = try fields.required("environment", "production or sandbox") { value in
            value.stringValue.flatMap { APNSEnvironment(rawValue: $0)?.rawValue }
        }
        var groupJobID: String?
        if fields.members["groupJobId"] != nil { groupJobID = try fields.required("groupJobId", "a canonical UUID", uuid) }
        let target: Target? =
            switch try fields.target(tokenMayBeEmpty: true) {
            case .token(let token)?: .token(token)
            case .channel(let channel)?: .channel(channel)
            case nil: nil
            }
        return DeliveryEvent(
            jobID: jobID, bundleID: bundleID, end: end, reason: reason, status: status, apnsID: apnsID,
            apnsUniqueID: apnsUniqueID, attempts: attempts, at: at, target: target, environment: environment,
            groupJobID: groupJobID)
    }

    /// One line for a person watching (`apns-worker events`): the time, the end, the job, the
    /// target redacted as in the worker's logs, Apple's status and reason, the attempts, the
    /// environment. Text from the event is shown with its control characters replaced: anyone
    /// who may publish on `apns.events` could write one.
    public var line: String {
        let shown: String
        switch target {
        case .channel(let channel)?: shown = "channel " + (channel.count > 8 ? "\(channel.prefix(4))…\(channel.suffix(4))" : "…")
        case .token(let token)? where token.count > 8: shown = "\(token.prefix(4))…\(token.suffix(4))"
        case .token?, nil: shown = "-"
        }
        var fields = [
            RFC3339.string(from: at), end.rawValue, "job \(Self.printable(jobID))", shown, "status \(status)", "attempts \(attempts)",
            Self.printable(environment),
        ]
        if let reason { fields.insert(Self.printable(reason), at: 5) }
        if let groupJobID { fields.append("group \(Self.printable(groupJobID))") }
        return fields.joined(separator: "  ")
    }

    /// At most 80 characters, control characters (C0, DEL, C1, the Unicode line and paragraph
    /// separators) as `?`.
    static func printable(_ text: String) -> String { LineSafeText.quoted(text, limit: 80) }
}
