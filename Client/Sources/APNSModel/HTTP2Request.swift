/// The HTTP/2 provider API as plain values: a `PushNotification` as request headers and body,
/// and an APNs response as an `HTTPAnswer`. The transport only moves these bytes.
import Foundation

extension APNSEnvironment {
    /// Apple's host for this environment.
    public var defaultHost: String {
        switch self {
        case .production: return "api.push.apple.com"
        case .sandbox: return "api.sandbox.push.apple.com"
        }
    }
}

/// One header field, in the order it is sent.
public struct HTTP2HeaderField: Sendable, Hashable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// A request to `POST /3/device/<token>`, or for a broadcast (contract §7) Apple's broadcast
/// request `POST /4/broadcasts/apps/<bundleID>` ("Sending broadcast push notification requests
/// to APNs"): the channel in `apns-channel-id`, the job id in `apns-request-id`, push type
/// `liveactivity`, no device token and no `apns-topic` (the bundle is the path's).
public struct HTTP2Request: Sendable, Hashable {
    /// Pseudo-headers first (HTTP/2 requires it), then Apple's headers.
    public var headers: [HTTP2HeaderField]
    public var body: [UInt8]

    /// - Parameters:
    ///   - authority: the `:authority`, i.e. the host the connection was made to.
    ///   - authorization: `bearer <jwt>` with token authentication, nil with a client certificate.
    public init(notification n: PushNotification, authority: String, authorization: String?) {
        var h: [HTTP2HeaderField] = []
        // Every field a request can carry, so the array is allocated once.
        h.reserveCapacity(12)
        h.append(.init(":method", "POST"))
        h.append(.init(":scheme", "https"))
        switch n.target {
        case .device(let token):
            h.append(.init(":path", LowercaseHex.string(token.bytes, after: "/3/device/")))
            h.append(.init(":authority", authority))
            h.append(.init("apns-id", LowercaseHex.string(n.id)))
            h.append(.init("apns-topic", n.topic))
        case .channel(let channel):
            h.append(.init(":path", "/4/broadcasts/apps/" + n.topic))
            h.append(.init(":authority", authority))
            h.append(.init("apns-request-id", LowercaseHex.string(n.id)))
            h.append(.init("apns-channel-id", channel.id))
        }
        h.append(.init("apns-push-type", n.pushType.rawValue))
        h.append(.init("apns-priority", String(n.priority)))
        if let expiration = n.expiration { h.append(.init("apns-expiration", String(expiration))) }
        if let collapseID = n.collapseID { h.append(.init("apns-collapse-id", collapseID)) }
        if let authorization { h.append(.init("authorization", authorization)) }
        h.append(.init("content-length", String(n.payload.count)))
        self.headers = h
        self.body = n.payload
    }

    /// The value of the first header called `name`.
    public func header(_ name: String) -> String? {
        headers.first { $0.name == name }?.value
    }
}

/// Reads APNs responses.
public enum HTTP2Response {
    /// Whether `answer` reads the response header called `name`; a client may keep only those.
    public static func readsHeader(named name: String) -> Bool {
        name == "apns-id" || name == "apns-request-id" || name == "apns-unique-id"
    }

    /// The answer for a response with this `:status`, headers and body. A body that is not the
    /// JSON Apple documents (or is empty, as on 200) leaves `reason` and `timestamp` nil rather
    /// than failing: the status alone still classifies the notification.
    public static func answer(status: Int, headers: [HTTP2HeaderField], body: [UInt8]) -> HTTPAnswer {
        var answer = HTTPAnswer(status: status)
        for field in headers {
            switch field.name {
            // A broadcast's answer names the request with `apns-request-id` instead.
            case "apns-id", "apns-request-id": answer.apnsID = LowercaseHex.uuid(field.value)
            case "apns-unique-id": answer.uniqueID = field.value
            default: break
            }
        }
        guard !body.isEmpty,
            let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
        else { return answer }
        if let reason = object["reason"] as? String { answer.reason = APNSReason(rawValue: reason) }
        switch object["timestamp"] {
        case let number as NSNumber: answer.timestamp = number.int64Value
        case let string as String: answer.timestamp = Int64(string)
        default: break
        }
        return answer
    }
}
