/// Who a notification is for (contract §2 and §7): one device, through its token, or every device
/// subscribed to a broadcast channel (Live Activities, iOS 18 and later).

/// A broadcast channel id as Apple issues it: standard base64 text (Apple's "Sending channel
/// management requests to APNs" returns it in `apns-channel-id`), sent back verbatim in the
/// broadcast request's `apns-channel-id` header.
///
/// Only well-formed ids exist as values: the base64 alphabet with `=` padding, a length that is
/// a multiple of 4, at most `maximumLength` characters. That also keeps every control character
/// and every byte HTTP/2 forbids in a header value out (contract §4: text that becomes a header
/// value never carries control characters).
public struct BroadcastChannel: Sendable, Hashable, CustomStringConvertible {
    /// The id exactly as Apple issued it.
    public let id: String

    /// Apple documents no length; its ids are 24 characters today (16 bytes). 256 leaves ample
    /// room for longer ids while bounding what a hostile job can put in a header.
    public static let maximumLength = 256

    /// Nil unless `id` is well-formed base64 of at most `maximumLength` characters.
    public init?(id: String) {
        guard Self.problem(id) == nil else { return nil }
        self.id = id
    }

    /// Why `id` is not a channel id, in one line that never echoes it; nil when it is one.
    public static func problem(_ id: String) -> String? {
        let utf8 = id.utf8
        if utf8.isEmpty { return "is empty" }
        if utf8.count > maximumLength { return "is \(utf8.count) bytes; at most \(maximumLength)" }
        var padding = 0
        for (position, c) in utf8.enumerated() {
            if c == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            let isBase64 = (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z")) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z"))
                || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || c == UInt8(ascii: "+") || c == UInt8(ascii: "/")
            if !isBase64 { return "has a character outside base64 at position \(position)" }
            if padding > 0 { return "has base64 padding before its end (position \(position))" }
        }
        if padding > 2 { return "has \(padding) padding characters; base64 has at most 2" }
        if utf8.count % 4 != 0 { return "is \(utf8.count) characters; base64 comes in groups of 4" }
        return nil
    }

    /// The first and last four characters: enough to correlate log lines.
    public var redacted: String {
        guard id.count > 8 else { return "…" }
        return "\(id.prefix(4))…\(id.suffix(4))"
    }

    public var description: String { redacted }
}

/// The target of one notification.
public enum PushTarget: Sendable, Hashable, CustomStringConvertible {
    /// One device: `POST /3/device/<token>`.
    case device(DeviceToken)
    /// Every device subscribed to the channel: `POST /4/broadcasts/apps/<bundle>`.
    case channel(BroadcastChannel)

    /// The device token; nil for a broadcast.
    public var token: DeviceToken? {
        if case .device(let token) = self { return token }
        return nil
    }

    /// The channel; nil for a device.
    public var channel: BroadcastChannel? {
        if case .channel(let channel) = self { return channel }
        return nil
    }

    /// For logs: never the whole token or channel id.
    public var redacted: String {
        switch self {
        case .device(let token): return token.redacted
        case .channel(let channel): return "channel " + channel.redacted
        }
    }

    public var description: String { redacted }
}
