/// The messages the sync server publishes to apns-worker (contract §2, §6, §7), as typed values that
/// encode to the JSON the worker reads and are validated by the worker's own parsers
/// (`JobParser`, `GroupJobParser`, `RegistrationMessage`) before anything is published. Payloads
/// and `userInfo` are any `Encodable` value (encoded with `JSONEncoder`) or JSON text as is.
import APNSModel
import APNSRegistryMessages
import Foundation

/// An APNs payload: the JSON object sent to Apple (it must hold `aps`).
///
///     let payload = try APNSPayload(json: #"{"aps":{"alert":"Hello"}}"#)
///     let silent = APNSPayload.contentAvailable
public struct APNSPayload: Sendable, Hashable {
    /// The payload's JSON text.
    public let json: String

    /// Any JSON text; the worker's parser checks it when the message is published.
    public init(json: String) {
        self.json = json
    }

    /// A payload encoded from any `Encodable` value (e.g. a struct with an `aps` member) with
    /// `encoder`. Throws `encodingFailed` when the encoder refuses it or it is not a JSON object;
    /// the size limit (4096 bytes as sent, 5120 for `voip`) is checked when it is published.
    ///
    ///     struct Alert: Encodable { struct APS: Encodable { var alert: String }; var aps: APS; var account: String }
    ///     let payload = try APNSPayload(Alert(aps: .init(alert: "Synced"), account: "42"))
    public init(_ value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws(APNSWorkerClientError) {
        self.json = try JSONText.encodeObject(value, encoder: encoder)
    }

    /// `{"aps":{"alert":TEXT}}`.
    public static func alert(_ text: String) -> APNSPayload {
        APNSPayload(json: "{\"aps\":{\"alert\":\(JSONText.string(text))}}")
    }

    /// `{"aps":{"content-available":1}}`: a background push (push-triggered sync).
    public static let contentAvailable = APNSPayload(json: #"{"aps":{"content-available":1}}"#)
}

/// Which delivery events a job's sender wants (contract §8), the job's `events` field: the client's
/// own type, so that an integrator's module that imports only `APNSWorkerClient` can name its
/// cases (the worker's `DeliveryEventLevel` lives in a module such a package does not import).
public enum DeliveryEventsWanted: String, Sendable, Hashable, CaseIterable {
    case none, ends, all
}

/// The optional fields a job and a group job share (contract §2).
public struct DeliveryOptions: Sendable, Hashable {
    /// `apns-push-type`; nil lets the worker choose from the payload.
    public var pushType: PushType?
    /// 10, 5 or 1; nil for the worker's default.
    public var priority: Int?
    /// UNIX seconds; 0 = deliver once, do not store.
    public var expiration: Int64?
    /// At most 64 bytes, no control characters.
    public var collapseID: String?
    /// Provider-side metadata (e.g. `syncServer`), never sent to Apple.
    public var userInfo: UserInfo
    /// Which delivery events to publish for this job (contract §8; `events(queue:bundleIDs:ends:)`
    /// reads them); nil: the bundle's `events`.
    public var events: DeliveryEventsWanted?

    public init(
        pushType: PushType? = nil, priority: Int? = nil, expiration: Int64? = nil, collapseID: String? = nil, userInfo: UserInfo = [:],
        events: DeliveryEventsWanted? = nil
    ) {
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.userInfo = userInfo
        self.events = events
    }

    func fields() -> [(String, String)] {
        var fields: [(String, String)] = []
        if let pushType { fields.append(("pushType", JSONText.string(pushType.rawValue))) }
        if let priority { fields.append(("priority", String(priority))) }
        if let expiration { fields.append(("expiration", String(expiration))) }
        if let collapseID { fields.append(("collapseId", JSONText.string(collapseID))) }
        if let json = userInfo.json { fields.append(("userInfo", json)) }
        if let events { fields.append(("events", JSONText.string(events.rawValue))) }
        return fields
    }
}

/// A job's `userInfo` (contract §2: an object, provider-side metadata the worker logs and its
/// rollout gate reads, never sent to Apple): string pairs as a dictionary literal, any
/// `Encodable` value that encodes to a JSON object, or JSON text as is.
///
///     DeliveryOptions(userInfo: ["syncServer": "sync-1"])
///     DeliveryOptions(userInfo: try UserInfo(Audit(syncServer: "sync-1", change: 42)))
public struct UserInfo: Sendable, Hashable, ExpressibleByDictionaryLiteral {
    /// The member's JSON text; nil: no `userInfo` member.
    public let json: String?

    /// JSON text as is (the worker's parser checks that it is an object when the job is published).
    public init(json: String) {
        self.json = json
    }

    /// Encodes `value` with `encoder`; throws `encodingFailed` unless it is a JSON object.
    public init(_ value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws(APNSWorkerClientError) {
        self.json = try JSONText.encodeObject(value, encoder: encoder)
    }

    /// String pairs, keys in order (nothing at all when empty).
    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    /// String pairs, keys in order (nothing at all when empty).
    public init(_ pairs: [(String, String)]) {
        json = pairs.isEmpty ? nil : JSONText.object(pairs.sorted { $0.0 < $1.0 }.map { ($0.0, JSONText.string($0.1)) })
    }

    public init(_ dictionary: [String: String]) {
        self.init(dictionary.map { ($0.key, $0.value) })
    }
}

/// A notification job for one device (contract §2), published to `apns.jobs` with the bundle ID
/// as routing key.
///
///     let job = NotificationJob(bundleID: "com.example.app", token: deviceToken, payload: .alert("Hello"))
///     try await client.publish(job)
public struct NotificationJob: Sendable, Hashable {
    public var bundleID: String
    /// Hexadecimal device token.
    public var token: String
    public var payload: APNSPayload
    public var options: DeliveryOptions
    /// Overrides the bundle's environment for this job (tokens of debug builds: `.sandbox`).
    public var environment: APNSEnvironment?
    /// The job's id (`apns-id`), kept for every attempt.
    public var id: UUID

    public init(
        bundleID: String, token: String, payload: APNSPayload, options: DeliveryOptions = DeliveryOptions(),
        environment: APNSEnvironment? = nil, id: UUID = UUID()
    ) {
        self.bundleID = bundleID
        self.token = token
        self.payload = payload
        self.options = options
        self.environment = environment
        self.id = id
    }

    /// The body the worker reads.
    public func body() -> [UInt8] {
        JobBody.encode(id: id, target: ("token", token), payload: payload, options: options, environment: environment)
    }

    /// The worker's own verdict (HTTP/2 transport rules; a binary bundle is stricter still).
    public func validate() throws(APNSWorkerClientError) {
        try JobBody.validate(body(), bundleID: bundleID)
    }
}

/// A broadcast job for a Live Activity channel (contract §7), published to `apns.jobs` with the
/// bundle ID as routing key: ONE request reaches every device subscribed to the channel. Its push
/// type is `liveactivity` (leave `options.pushType` nil or set that) and it has no collapse id.
///
///     let update = APNSPayload(json: #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}"#)
///     try await client.publish(BroadcastJob(bundleID: "com.example.app", channel: channelID, payload: update))
public struct BroadcastJob: Sendable, Hashable {
    public var bundleID: String
    /// The channel id Apple issued (base64).
    public var channel: String
    public var payload: APNSPayload
    public var options: DeliveryOptions
    public var environment: APNSEnvironment?
    public var id: UUID

    public init(
        bundleID: String, channel: String, payload: APNSPayload, options: DeliveryOptions = DeliveryOptions(),
        environment: APNSEnvironment? = nil, id: UUID = UUID()
    ) {
        self.bundleID = bundleID
        self.channel = channel
        self.payload = payload
        self.options = options
        self.environment = environment
        self.id = id
    }

    public func body() -> [UInt8] {
        JobBody.encode(id: id, target: ("channel", channel), payload: payload, options: options, environment: environment)
    }

    /// The worker's own verdict (broadcasts exist on the HTTP/2 transport only).
    public func validate() throws(APNSWorkerClientError) {
        try JobBody.validate(body(), bundleID: bundleID)
    }
}

/// One message for every active device of a group (contract §6), published to `apns.groups`;
/// the worker fans it out, across bundle IDs, to the devices the registry holds.
///
///     // Tell every other device of the account to sync:
///     let job = GroupNotificationJob(group: "account-42", payload: .contentAvailable, except: [changingDeviceToken])
///     try await client.publish(job)
public struct GroupNotificationJob: Sendable, Hashable {
    public var group: String
    public var payload: APNSPayload
    public var options: DeliveryOptions
    /// Tokens not to notify (usually the device that made the change).
    public var except: [String]
    /// Only devices of these bundle IDs; nil for all.
    public var bundleIDs: [String]?
    public var id: UUID

    public init(
        group: String, payload: APNSPayload, options: DeliveryOptions = DeliveryOptions(), except: [String] = [],
        bundleIDs: [String]? = nil, id: UUID = UUID()
    ) {
        self.group = group
        self.payload = payload
        self.options = options
        self.except = except
        self.bundleIDs = bundleIDs
        self.id = id
    }

    public func body() -> [UInt8] {
        var fields = [("id", JSONText.string(id.uuidString.lowercased())), ("group", JSONText.string(group)), ("payload", payload.json)]
        fields += options.fields()
        if !except.isEmpty { fields.append(("except", JSONText.array(except.map(JSONText.string)))) }
        if let bundleIDs { fields.append(("bundleIds", JSONText.array(bundleIDs.map(JSONText.string)))) }
        return Array(JSONText.object(fields).utf8)
    }

    public func validate() throws(APNSWorkerClientError) {
        if case .failure(let error) = GroupJobParser.parse(body: body(), messageID: nil) {
            throw APNSWorkerClientError.refused(error)
        }
    }
}

/// A device joining or leaving a group (contract §6), published to `apns.registry`. Changes to
/// one device take effect in `at` order, whatever order they arrive in.
///
///     try await client.publish(Registration.register(bundleID: "com.example.app", token: token, group: "account-42"))
public struct Registration: Sendable, Hashable {
    public var operation: RegistrationMessage.Operation
    public var bundleID: String
    public var token: String
    /// Required for `register`.
    public var group: String?
    public var environment: APNSEnvironment?
    /// When the change was made, ms since the epoch.
    public var at: Int64

    public init(
        operation: RegistrationMessage.Operation, bundleID: String, token: String, group: String?, environment: APNSEnvironment? = nil,
        at: Int64 = Int64(Date().timeIntervalSince1970 * 1000)
    ) {
        self.operation = operation
        self.bundleID = bundleID
        self.token = token
        self.group = group
        self.environment = environment
        self.at = at
    }

    public static func register(bundleID: String, token: String, group: String, environment: APNSEnvironment? = nil) -> Registration {
        Registration(operation: .register, bundleID: bundleID, token: token, group: group, environment: environment)
    }

    public static func unregister(bundleID: String, token: String) -> Registration {
        Registration(operation: .unregister, bundleID: bundleID, token: token, group: nil)
    }

    public func body() -> [UInt8] {
        var fields = [("op", JSONText.string(operation.rawValue)), ("bundleId", JSONText.string(bundleID)), ("token", JSONText.string(token))]
        if let group { fields.append(("group", JSONText.string(group))) }
        if let environment { fields.append(("environment", JSONText.string(environment.rawValue))) }
        fields.append(("at", String(at)))
        return Array(JSONText.object(fields).utf8)
    }

    public func validate() throws(APNSWorkerClientError) {
        if case .failure(let error) = RegistrationMessage.parse(body: body()) {
            throw APNSWorkerClientError.invalidMessage(error)
        }
    }
}

/// The body of a section-2 job, a device's or a channel's (they differ in that one field), and
/// the worker's verdict on it.
enum JobBody {
    static func encode(
        id: UUID, target: (field: String, value: String), payload: APNSPayload, options: DeliveryOptions, environment: APNSEnvironment?
    ) -> [UInt8] {
        var fields = [("id", JSONText.string(id.uuidString.lowercased())), (target.field, JSONText.string(target.value)), ("payload", payload.json)]
        fields += options.fields()
        if let environment { fields.append(("environment", JSONText.string(environment.rawValue))) }
        return Array(JSONText.object(fields).utf8)
    }

    static func validate(_ body: [UInt8], bundleID: String) throws(APNSWorkerClientError) {
        // The routing key: no worker takes a bundle outside contract §6's shape (its
        // configuration refuses one), so such a job would wait in `apns.unrouted` for ever, and
        // past 255 bytes the broker cannot be sent it at all.
        guard UntrustedText.isBundleID(bundleID) else {
            throw .invalidMessage(
                .malformed("bundleID", "not a bundle ID: 1 to \(UntrustedText.maxBundleIDBytes) bytes of letters, digits, \".\" and \"-\""))
        }
        if case .failure(let error) = JobParser.parse(
            body: body, bundleID: bundleID, messageID: nil, defaultEnvironment: .production, transport: .http2)
        {
            throw APNSWorkerClientError.refused(error)
        }
    }
}

/// Writes JSON text from pieces that are already JSON: the payload goes to the worker with its
/// own key order and number lexemes, which a round trip through `JSONSerialization` would not
/// keep. Strings are escaped by `JSONEncoder`.
enum JSONText {
    static func string(_ text: String) -> String {
        // Encoding a String cannot fail.
        String(decoding: (try? JSONEncoder().encode(text)) ?? Data("\"\"".utf8), as: UTF8.self)
    }

    static func object(_ members: [(String, String)]) -> String {
        "{" + members.map { "\(string($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    static func array(_ items: [String]) -> String {
        "[" + items.joined(separator: ",") + "]"
    }

    /// `value` as JSON object text, or `encodingFailed`.
    static func encodeObject(_ value: some Encodable, encoder: JSONEncoder) throws(APNSWorkerClientError) -> String {
        let data: Data
        do {
            data = try encoder.encode(value)
        } catch {
            throw .encodingFailed("\(error)")
        }
        guard (try? JSONSerialization.jsonObject(with: data)) is [String: Any] else {
            throw .encodingFailed("\(type(of: value)) does not encode to a JSON object")
        }
        return String(decoding: data, as: UTF8.self)
    }
}
