/// A feedback event from `apns.feedback` (contract §4 for a device token, §7 for a broadcast
/// channel) as the sync server receives it, and its parser. Pure: the body is hostile input
/// (anyone with publish rights on the exchange can send anything), so every field is checked and
/// a body that is not an event is a `MalformedFeedback`, never a crash.
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

    /// The event in `body`, or why it is not one.
    public static func parse(_ body: [UInt8]) -> Result<FeedbackEvent, MalformedFeedback> {
        guard body.count <= maxBodyBytes else {
            return .failure(MalformedFeedback("the body is \(body.count) bytes; at most \(maxBodyBytes) are accepted"))
        }
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: Data(body))
        } catch DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context),
            DecodingError.dataCorrupted(let context)
        {
            return .failure(MalformedFeedback("\(context.codingPath.map(\.stringValue).joined(separator: ".")): \(context.debugDescription)"))
        } catch DecodingError.keyNotFound(let key, _) {
            return .failure(MalformedFeedback("\(key.stringValue) is missing"))
        } catch {
            return .failure(MalformedFeedback("not a JSON object: \(error)"))
        }
        return wire.event()
    }

    /// The members as the worker writes them; `timestamp` and `jobId` may be null.
    private struct Wire: Decodable {
        var bundleId: String
        var token: String?
        var channel: String?
        var reason: String
        var timestamp: Int64?
        var jobId: String?

        func event() -> Result<FeedbackEvent, MalformedFeedback> {
            guard UntrustedText.isBundleID(bundleId) else { return .failure(MalformedFeedback("bundleId is not a bundle ID")) }
            guard UntrustedText.isPlain(reason, maxBytes: FeedbackEvent.maxFieldBytes) else {
                return .failure(MalformedFeedback("reason must be 1 to \(FeedbackEvent.maxFieldBytes) bytes without control characters"))
            }
            if let jobId, !UntrustedText.isPlain(jobId, maxBytes: FeedbackEvent.maxFieldBytes) {
                return .failure(MalformedFeedback("jobId must be 1 to \(FeedbackEvent.maxFieldBytes) bytes without control characters"))
            }
            let target: Target
            switch (token, channel) {
            case (let token?, nil):
                guard token.utf8.count <= FeedbackEvent.maxFieldBytes, !token.isEmpty,
                    token.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0 | 0x20) }) else {
                    return .failure(MalformedFeedback("token must be hexadecimal"))
                }
                target = .token(token.lowercased())
            case (nil, let channel?):
                guard UntrustedText.isPlain(channel, maxBytes: FeedbackEvent.maxFieldBytes) else {
                    return .failure(MalformedFeedback("channel must be 1 to \(FeedbackEvent.maxFieldBytes) bytes without control characters"))
                }
                target = .channel(channel)
            default:
                return .failure(MalformedFeedback("exactly one of token and channel must be given"))
            }
            return .success(FeedbackEvent(bundleID: bundleId, target: target, reason: reason, timestamp: timestamp, jobID: jobId))
        }
    }
}

/// A message on `apns.feedback` that is not a feedback event: one line saying why.
public struct MalformedFeedback: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { "malformed feedback event: \(message)" }
}
