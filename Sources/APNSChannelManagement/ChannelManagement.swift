/// Apple's channel management API for broadcast push (contract §7) as plain values: the request
/// of each operation and the reading of its answer. The wire reference is Apple's "Sending
/// channel management requests to APNs": its own host and port per environment, `POST`, `GET`
/// and `DELETE` on `/1/apps/<bundleID>/channels` (the channel in `apns-channel-id`), `GET
/// /1/apps/<bundleID>/all-channels`, an optional `apns-request-id`. The client only moves bytes.
import APNSJSON
import APNSModel
import Foundation

extension APNSEnvironment {
    /// Apple's channel management host for this environment.
    public var channelManagementHost: String {
        switch self {
        case .production: return "api-manage-broadcast.push.apple.com"
        case .sandbox: return "api-manage-broadcast.sandbox.push.apple.com"
        }
    }

    /// Apple's channel management port: 2196 in production, 2195 in development (sandbox).
    public var channelManagementPort: Int {
        switch self {
        case .production: return 2196
        case .sandbox: return 2195
        }
    }
}

/// Whether APNs keeps the last message of a channel for devices that were offline.
public enum ChannelStoragePolicy: Int, Sendable, Hashable, CaseIterable, Codable {
    /// Apple's 0: nothing is stored.
    case noMessageStored = 0
    /// Apple's 1: the most recent message is stored.
    case mostRecentMessageStored = 1
}

/// One channel management operation.
public enum ChannelOperationRequest: Sendable, Hashable {
    case create(storagePolicy: ChannelStoragePolicy)
    case read(BroadcastChannel)
    case delete(BroadcastChannel)
    case list
}

/// What an operation answered.
public enum ChannelManagementResult: Sendable, Hashable {
    /// 201: the new channel's id.
    case created(BroadcastChannel)
    /// 200 to a read: the channel's storage policy.
    case channel(BroadcastChannel, storagePolicy: ChannelStoragePolicy)
    /// 204 to a delete.
    case deleted
    /// 200 to a list: every channel of the bundle in this environment.
    case channels([BroadcastChannel])
}

/// Apple refused, or the answer was not what Apple documents: the status and Apple's reason as
/// they came (contract §7: "Apple's errors come back as they are").
public struct ChannelManagementError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Apple's HTTP status; 0 when there was no answer.
    public var status: Int
    /// Apple's `reason`, or a short description of what was wrong with the answer.
    public var reason: String
    /// Set when the worker did not send the request because Apple would refuse it with `status`
    /// and `reason` (the bundle's token key cannot sign for it): why, in one line.
    public var notSent: String?

    public init(status: Int, reason: String, notSent: String? = nil) {
        self.status = status
        self.reason = reason
        self.notSent = notSent
    }

    public var description: String {
        if let notSent { return "\(notSent); not sent: APNs would answer \(status) \(reason)" }
        return status == 0 ? reason : "APNs answered \(status) \(reason)"
    }
}

/// A channel management request ready for the wire.
public struct ChannelManagementRequest: Sendable, Hashable {
    public var operation: ChannelOperationRequest
    /// Pseudo-headers first, then Apple's headers.
    public var headers: [HTTP2HeaderField]
    public var body: [UInt8]

    /// - Parameters:
    ///   - authority: the host the connection was made to.
    ///   - authorization: `bearer <jwt>` with token authentication, nil with a client certificate.
    ///   - requestID: sent as `apns-request-id`; Apple echoes it.
    public init(
        _ operation: ChannelOperationRequest, bundleID: String, authority: String, authorization: String?, requestID: UUID
    ) {
        self.operation = operation
        let base = "/1/apps/" + bundleID
        let (method, path, channel): (String, String, BroadcastChannel?)
        var body: [UInt8] = []
        switch operation {
        case .create(let policy):
            (method, path, channel) = ("POST", base + "/channels", nil)
            body = FlatJSON.object(["message-storage-policy": .integer(Int64(policy.rawValue)), "push-type": .string("LiveActivity")])
        case .read(let c): (method, path, channel) = ("GET", base + "/channels", c)
        case .delete(let c): (method, path, channel) = ("DELETE", base + "/channels", c)
        case .list: (method, path, channel) = ("GET", base + "/all-channels", nil)
        }
        var h: [HTTP2HeaderField] = [
            .init(":method", method), .init(":scheme", "https"), .init(":path", path), .init(":authority", authority),
            .init("apns-request-id", LowercaseHex.string(requestID)),
        ]
        if let channel { h.append(.init("apns-channel-id", channel.id)) }
        if let authorization { h.append(.init("authorization", authorization)) }
        if !body.isEmpty {
            h.append(.init("content-type", "application/json"))
            h.append(.init("content-length", String(body.count)))
        }
        self.headers = h
        self.body = body
    }

    /// The value of the first header called `name`.
    public func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }

    /// Reads Apple's answer to this request.
    public func result(status: Int, headers: [HTTP2HeaderField], body: [UInt8]) -> Result<ChannelManagementResult, ChannelManagementError> {
        func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
        let object = body.isEmpty ? nil : (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        guard (200...299).contains(status) else {
            let reason = (object?["reason"] as? String).map(Self.printable) ?? "HTTP\(status)"
            return .failure(ChannelManagementError(status: status, reason: reason))
        }
        func invalid(_ what: String) -> Result<ChannelManagementResult, ChannelManagementError> {
            .failure(ChannelManagementError(status: status, reason: "unexpected answer: \(what)"))
        }
        switch operation {
        case .create:
            guard let id = header("apns-channel-id") else { return invalid("no apns-channel-id") }
            guard let channel = BroadcastChannel(id: id) else { return invalid("apns-channel-id is not a channel id") }
            return .success(.created(channel))
        case .read(let channel):
            guard let raw = object?["message-storage-policy"] as? Int, let policy = ChannelStoragePolicy(rawValue: raw) else {
                return invalid("no message-storage-policy of 0 or 1")
            }
            return .success(.channel(channel, storagePolicy: policy))
        case .delete:
            return .success(.deleted)
        case .list:
            guard let ids = object?["channels"] as? [Any] else { return invalid("no channels array") }
            var channels: [BroadcastChannel] = []
            for case let id as String in ids {
                guard let channel = BroadcastChannel(id: id) else { return invalid("a listed id is not a channel id") }
                channels.append(channel)
            }
            return .success(.channels(channels))
        }
    }

    /// Apple's reason quoted in one line: at most 100 characters, control characters replaced.
    static func printable(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars.prefix(100) {
            out.unicodeScalars.append(scalar.value < 0x20 || scalar.value == 0x7F ? "?" : scalar)
        }
        return out
    }
}
