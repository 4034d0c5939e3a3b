/// The shape rules for text taken from messages anyone on the vhost can publish (contract §4
/// "Hostile and damaged input", §6): checked once where a message is parsed, so nothing after the
/// parser (PostgreSQL, a header, a log line, the fleet page) sees a control character or an
/// unbounded string.
public enum UntrustedText {
    /// 1 to `maxBytes` bytes of UTF-8 (a Swift `String` always is) without control characters
    /// (Unicode category Cc: U+0000 to U+001F and U+007F to U+009F).
    public static func isPlain(_ text: String, maxBytes: Int, allowEmpty: Bool = false) -> Bool {
        let count = text.utf8.count
        guard count <= maxBytes, allowEmpty || count > 0 else { return false }
        return !text.unicodeScalars.contains(where: isControl)
    }

    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// The longest bundle ID §6 accepts.
    public static let maxBundleIDBytes = 155

    /// A bundle ID as §6 defines it for registrations: 1 to 155 bytes of ASCII letters, digits,
    /// `.` and `-`.
    public static func isBundleID(_ text: String) -> Bool {
        let bytes = text.utf8
        guard (1...maxBundleIDBytes).contains(bytes.count) else { return false }
        return bytes.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"):
                true
            default: false
            }
        }
    }

    /// The largest count a heartbeat may carry (contract §5): 2^53, the largest integer every
    /// JSON reader keeps exactly.
    public static let maxCount = 1 << 53
}

extension Int {
    /// `self + other`, stopping at `Int.max`/`Int.min` instead of trapping: sums of counts that
    /// came from outside.
    public func saturatingAdd(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }
}
