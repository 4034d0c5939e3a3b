import Foundation

/// The APNs environment a notification is sent to.
public enum APNSEnvironment: String, Sendable, Hashable, CaseIterable, Codable {
    case production
    case sandbox
}

/// Apple's `apns-push-type` values.
public enum PushType: String, Sendable, Hashable, CaseIterable, Codable {
    case alert, background, voip, complication, fileprovider, mdm, liveactivity, location
    case pushtotalk, widgets, controls
}

/// A device token as raw bytes. Its description is redacted so a token never reaches a log
/// by accident; use `hex` where the full token is really needed (the wire, feedback events).
public struct DeviceToken: Sendable, Hashable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// Parses hexadecimal in either case; nil for an empty string, odd length or a non-hex digit.
    public init?(hex: String) {
        // Two digits a byte, straight from the string's UTF-8 into the array's storage: this
        // runs once per job (it was 4.5 % of a job's parse, digit by digit through an optional).
        var hex = hex
        let parsed: [UInt8]? = hex.withUTF8 { utf8 in
            let count = utf8.count / 2
            guard count > 0, utf8.count % 2 == 0 else { return nil }
            var valid = true
            let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                for i in 0..<count {
                    guard let high = Self.hexDigitValue(utf8[2 * i]), let low = Self.hexDigitValue(utf8[2 * i + 1]) else {
                        valid = false
                        break
                    }
                    buffer[i] = high << 4 | low
                    initialized = i + 1
                }
            }
            return valid ? bytes : nil
        }
        guard let parsed else { return nil }
        self.bytes = parsed
    }

    /// The value of one ASCII hexadecimal digit (either case), or nil.
    @inlinable
    public static func hexDigitValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Lower-case hexadecimal, as Apple expects it in the request path.
    public var hex: String { LowercaseHex.string(bytes) }

    /// The first and last four hex digits only: enough to correlate log lines, useless to an attacker.
    public var redacted: String {
        let h = hex
        guard h.count > 8 else { return "…" }
        return "\(h.prefix(4))…\(h.suffix(4))"
    }

    public var description: String { redacted }
}

/// One notification ready for a transport: validated, with every APNs header decided.
public struct PushNotification: Sendable, Hashable {
    /// `apns-id`; kept for every attempt of the same job.
    public var id: UUID
    /// One device, or a broadcast channel.
    public var target: PushTarget
    /// `apns-topic`: the bundle ID plus the push type's suffix.
    public var topic: String
    public var pushType: PushType
    /// `apns-priority`: 10, 5 or 1.
    public var priority: Int
    /// `apns-expiration` in UNIX seconds; nil sends no header, 0 means deliver once.
    public var expiration: Int?
    public var collapseID: String?
    /// The JSON payload exactly as it goes on the wire.
    public var payload: [UInt8]
    public var environment: APNSEnvironment

    public init(
        id: UUID, target: PushTarget, topic: String, pushType: PushType, priority: Int,
        expiration: Int?, collapseID: String?, payload: [UInt8], environment: APNSEnvironment
    ) {
        self.id = id
        self.target = target
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.payload = payload
        self.environment = environment
    }
}

extension PushNotification {
    /// A notification for one device.
    public init(
        id: UUID, token: DeviceToken, topic: String, pushType: PushType, priority: Int,
        expiration: Int?, collapseID: String?, payload: [UInt8], environment: APNSEnvironment
    ) {
        self.init(
            id: id, target: .device(token), topic: topic, pushType: pushType, priority: priority, expiration: expiration,
            collapseID: collapseID, payload: payload, environment: environment)
    }

    /// The device token; nil for a broadcast.
    public var token: DeviceToken? { target.token }
}
