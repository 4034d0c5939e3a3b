/// A feedback event from `apns.feedback` (contract §4 for a device token, §7 for a broadcast
/// channel) as the sync server receives it, and its parser. Pure: the body is hostile input
/// (anyone with publish rights on the exchange can send anything), so every field is checked and
/// a body that is not an event is a `MalformedFeedback`, never a crash.
import APNSJSON
import APNSModel
import Foundation

/// What Apple reported as no longer reachable: prune it.
public struct FeedbackEvent: Sendable, Hashable {
    /// What the event names: a device token (hexadecimal, lower case) or a broadcast channel id.
    public enum Target: Sendable, Hashable {
        case token(String)
        case channel(String)
    }

    public var bundleID: String
    public var target: Target
    /// Apple's reason (`Unregistered`, `BadDeviceToken`, `ExpiredToken`, `DeviceTokenNotForTopic`,
    /// `InvalidToken` for the binary transport, or a channel reason).
    public var reason: String
    /// When Apple said the token stopped being valid, ms since the epoch; nil when Apple gave none.
    public var timestamp: Int64?
    /// The job that found out; nil for tokens the legacy feedback service reported.
    public var jobID: String?

    public init(bundleID: String, target: Target, reason: String, timestamp: Int64?, jobID: String?) {
        self.bundleID = bundleID
        self.target = target
        self.reason = reason
        self.timestamp = timestamp
        self.jobID = jobID
    }

    /// The largest body taken as an event: the worker's are a few hundred bytes.
    public static let maxBodyBytes = 64 * 1024
    /// Bounds of the text fields (a token or channel id is far shorter; these keep logs and
    /// databases safe from what a hostile publisher sends).
    static let maxFieldBytes = 1024

    /// The event in `body`, or why it is not one: exactly what docs/schemas/feedback-event.schema.json
    /// accepts (ContractCorpusTests runs both over the same corpus), bar what JSON Schema cannot
    /// see (a key twice, nesting over 64 levels, a body over 64 KiB).
    public static func parse(_ body: [UInt8]) -> Result<FeedbackEvent, MalformedFeedback> {
        do throws(MalformedFeedback) {
            let fields = try EventFields(body, maxBodyBytes: maxBodyBytes)
            let bundleID = try fields.bundleID()
            // Never nil: an empty token is refused here.
            guard var target = try fields.target(tokenMayBeEmpty: false) else { throw MalformedFeedback("token is empty") }
            if case .token(let hex) = target { target = .token(hex.lowercased()) }
            let reason = try fields.text("reason")
            let timestamp = try fields.nullable("timestamp", "ms since the epoch (0 to 2^63−1)") { $0.wholeNumberValue.flatMap { $0 >= 0 ? $0 : nil } }
            let jobID = try fields.nullable("jobId", "a canonical UUID") { $0.stringValue.flatMap { JobParser.canonicalUUID($0) != nil ? $0 : nil } }
            return .success(FeedbackEvent(bundleID: bundleID, target: target, reason: reason, timestamp: timestamp, jobID: jobID))
        } catch {
            return .failure(error)
        }
    }
}

/// The members of an event body the worker wrote (`apns.feedback`, `apns.events`), read by the
/// rules of its schema in docs/schemas/: a required member must be there, `null` only where the
/// schema allows it, and a member of the wrong type or shape refuses the whole event.
struct EventFields {
    let members: [String: JSONValue]

    init(_ body: [UInt8], maxBodyBytes: Int) throws(MalformedFeedback) {
        guard body.count <= maxBodyBytes else {
            throw MalformedFeedback("the body is \(body.count) bytes; at most \(maxBodyBytes) are accepted")
        }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: body, maxDepth: 64)
        } catch {
            throw MalformedFeedback(error.description)
        }
        guard case .object(let members) = value else { throw MalformedFeedback("not a JSON object") }
        self.members = members
    }

    /// A required member that may be `null` (nil), else a value `read` accepts.
    func nullable<T>(_ name: String, _ rule: String, _ read: (JSONValue) -> T?) throws(MalformedFeedback) -> T? {
        guard let value = members[name] else { throw MalformedFeedback("\(name) is missing") }
        if value == .null { return nil }
        guard let read = read(value) else { throw MalformedFeedback("\(name) must be null or \(rule)") }
        return read
    }

    /// A required member that must be a value `read` accepts.
    func required<T>(_ name: String, _ rule: String, _ read: (JSONValue) -> T?) throws(MalformedFeedback) -> T {
        guard let value = members[name] else { throw MalformedFeedback("\(name) is missing") }
        guard let read = read(value) else { throw MalformedFeedback("\(name) must be \(rule)") }
        return read
    }

    func bundleID() throws(MalformedFeedback) -> String {
        try required("bundleId", "a bundle ID (letters, digits, '.' and '-', at most 155 bytes)") { value in
            value.stringValue.flatMap { UntrustedText.isBundleID($0) ? $0 : nil }
        }
    }

    /// A reason (Apple's or the worker's): 1 to 1024 bytes without control characters.
    static func isReason(_ text: String) -> Bool { UntrustedText.isPlain(text, maxBytes: FeedbackEvent.maxFieldBytes) }

    func text(_ name: String) throws(MalformedFeedback) -> String {
        try required(name, "1 to \(FeedbackEvent.maxFieldBytes) bytes without control characters") { value in
            value.stringValue.flatMap { Self.isReason($0) ? $0 : nil }
        }
    }

    /// Exactly one of `token` (hex digits of whole bytes, at most 200, as written; "" only where
    /// `tokenMayBeEmpty`, a job the worker could not read) and `channel` (a base64 channel id).
    /// Nil for an empty token.
    func target(tokenMayBeEmpty: Bool) throws(MalformedFeedback) -> FeedbackEvent.Target? {
        switch (members["token"], members["channel"]) {
        case (let token?, nil):
            guard case .string(let hex) = token,
                (hex.isEmpty && tokenMayBeEmpty) || (DeviceToken(hex: hex) != nil && hex.utf8.count <= 2 * JobParser.maxTokenBytes)
            else { throw MalformedFeedback("token must be \(tokenMayBeEmpty ? "0" : "2") to 200 hex digits of whole bytes") }
            return hex.isEmpty ? nil : .token(hex)
        case (nil, let channel?):
            guard case .string(let id) = channel, BroadcastChannel.problem(id) == nil else {
                throw MalformedFeedback("channel must be a base64 channel id of 4 to \(BroadcastChannel.maximumLength) characters")
            }
            return .channel(id)
        default:
            throw MalformedFeedback("exactly one of token and channel must be given")
        }
    }
}

/// A message on `apns.feedback` that is not a feedback event: one line saying why.
public struct MalformedFeedback: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { "malformed feedback event: \(message)" }
}
