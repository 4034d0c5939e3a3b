import APNSJSON
import Foundation

/// A validated job (contract §2): what the sync server asked for, with every default decided.
/// `JobParser` is the only way to build one from a message body.

/// The APNs transport a bundle uses; the job rules differ slightly between them.
public enum TransportKind: String, Sendable, Hashable, CaseIterable {
    /// The HTTP/2 provider API.
    case http2
    /// The legacy binary provider API: 32-byte tokens, 2048-byte payloads, no push type,
    /// no collapse id, priority 10 or 5 only.
    case binary
}

public struct Job: Sendable, Hashable {
    /// `apns-id`; the same for every attempt of the job.
    public var id: UUID
    /// `id` was made here: the body had none and the AMQP `message_id` is no UUID. Only such an
    /// id travels on as the `message_id` of the job's copies (contract §2).
    public var idGenerated = false
    /// The bundle ID the job was published for (the routing key / the configured bundle).
    public var bundleID: String
    /// One device, or a broadcast channel (contract §7).
    public var target: PushTarget
    /// The payload exactly as it is sent to Apple: the job's `payload` object with insignificant
    /// whitespace removed; key order, escapes and number lexemes are the sync server's own.
    public var payload: [UInt8]
    public var pushType: PushType
    /// 10, 5 or 1 (binary: 10 or 5).
    public var priority: Int
    /// UNIX seconds; nil when the job has none (no `apns-expiration` header), 0 = deliver once.
    public var expiration: Int?
    public var collapseID: String?
    public var environment: APNSEnvironment
    /// Provider-side metadata; never sent to Apple. Empty when the job has none.
    public var userInfo: [String: JSONValue]
    /// The delivery events this job's sender wants (contract §8); nil: the bundle's `events`.
    public var events: DeliveryEventLevel?

    public init(
        id: UUID, bundleID: String, target: PushTarget, payload: [UInt8], pushType: PushType,
        priority: Int, expiration: Int?, collapseID: String?, environment: APNSEnvironment,
        userInfo: [String: JSONValue], events: DeliveryEventLevel? = nil
    ) {
        self.id = id
        self.bundleID = bundleID
        self.target = target
        self.payload = payload
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.environment = environment
        self.userInfo = userInfo
        self.events = events
    }

    /// The device token; nil for a broadcast job.
    public var token: DeviceToken? { target.token }

    /// `apns-topic`: the bundle ID plus Apple's suffix for the push type. A broadcast has no
    /// topic header; its bundle ID goes into the request path, so its topic is the bare bundle ID.
    public var topic: String {
        guard target.channel == nil else { return bundleID }
        let suffix = pushType.topicSuffix
        return suffix.isEmpty ? bundleID : bundleID + suffix
    }

    /// What a transport sends for this job.
    public var notification: PushNotification {
        PushNotification(
            id: id, target: target, topic: topic, pushType: pushType, priority: priority,
            expiration: expiration, collapseID: collapseID, payload: payload,
            environment: environment)
    }
}

extension PushType {
    /// Apple's suffix to the bundle ID in `apns-topic` for this push type (Apple's "Sending
    /// notification requests to APNs" table). `widgets` and `controls` use `.push-type.widgets`
    /// and `.push-type.controls` as in Apple's WidgetKit and ControlKit push documentation.
    /// `mdm` has none here: its topic is the UID of the MDM push certificate, which is what the
    /// operator configures as the "bundle ID" of such a section.
    public var topicSuffix: String {
        switch self {
        case .alert, .background, .mdm: return ""
        case .voip: return ".voip"
        case .complication: return ".complication"
        case .fileprovider: return ".pushkit.fileprovider"
        case .liveactivity: return ".push-type.liveactivity"
        case .location: return ".location-query"
        case .pushtotalk: return ".voip-ptt"
        case .widgets: return ".push-type.widgets"
        case .controls: return ".push-type.controls"
        }
    }
}

/// Why a body is not a valid job: which field, and one line saying why.
public struct JobError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The dead-letter class of the problem; its raw value is the `x-apns-reason` header.
    public enum Kind: String, Sendable, Hashable {
        /// Not JSON, not UTF-8, a missing or ill-typed field, a value out of range.
        case malformedJob = "MalformedJob"
        /// The payload is larger, as sent, than the push type and transport allow.
        case payloadTooLarge = "PayloadTooLarge"
    }

    public var kind: Kind
    /// The JSON field at fault (`token`, `payload.aps`, …), or `body` for the body as a whole.
    public var field: String
    /// One human-readable line, safe to log and to put in `x-apns-error` (never holds the token).
    public var message: String

    public init(kind: Kind, field: String, message: String) {
        self.kind = kind
        self.field = field
        self.message = message
    }

    package static func malformed(_ field: String, _ message: String) -> JobError {
        JobError(kind: .malformedJob, field: field, message: message)
    }

    /// A message whose AMQP properties (headers included) took `size` bytes, over `limit`
    /// (contract §4 "The AMQP envelope is input too"): malformed, whatever its body.
    public static func oversizedProperties(_ size: Int, limit: Int) -> JobError {
        malformed("properties", "the AMQP properties and headers take \(size) bytes, over the \(limit) allowed; \(headerTableDropped)")
    }

    /// A message whose header table nested deeper than `limit` levels (contract §4): malformed,
    /// whatever its body.
    public static func nestedHeaders(limit: Int) -> JobError {
        malformed("headers", "the AMQP header table nests deeper than \(limit) levels; \(headerTableDropped)")
    }

    /// How the two errors above end, in `x-apns-error` too: the operator tools read it to say a
    /// requeued copy goes back without the headers the job arrived with.
    public static let headerTableDropped = "the header table was dropped"

    /// `x-apns-reason` for the dead letter.
    public var reason: String { kind.rawValue }

    public var description: String { "\(field): \(message)" }
}
