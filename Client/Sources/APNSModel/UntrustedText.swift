import APNSJSON

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

    static func isControl(_ scalar: Unicode.Scalar) -> Bool { LineSafeText.isControl(scalar) }

    /// Why `text` cannot be sent as an HTTP/2 field value, in one line that never echoes it; nil
    /// when it can. The one rule for every job field that becomes a header value (contract §4):
    /// no control character (U+0000–U+001F, U+007F: in UTF-8 single bytes that occur in no other
    /// character) and no space or tab at either end (RFC 9110 §5.5 field-value, RFC 9113
    /// §8.2.1), since NIOHTTP2's own validation is off and a peer resets the stream on either.
    /// Trimming is not done: the value is the sender's, and Apple compares collapse ids exactly.
    public static func headerValueProblem(_ text: String) -> String? {
        let bytes = text.utf8
        if let position = bytes.firstIndex(where: { $0 < 0x20 || $0 == 0x7F }) {
            return "has a control character at byte \(bytes.distance(from: bytes.startIndex, to: position))"
        }
        if bytes.first == UInt8(ascii: " ") || bytes.last == UInt8(ascii: " ") {
            return "begins or ends with a space, which an HTTP/2 header value may not (RFC 9110 §5.5)"
        }
        return nil
    }

    /// The longest bundle ID §6 accepts.
    public static let maxBundleIDBytes = 155

    /// A bundle ID as §6 defines it for registrations: 1 to 155 bytes of ASCII letters, digits,
    /// `.` and `-`. The one definition: the configuration adds its own rule on top (no dot at
    /// either end) but takes this one as it is.
    public static func isBundleID(_ text: String) -> Bool {
        (1...maxBundleIDBytes).contains(text.utf8.count) && hasBundleIDCharactersOnly(text)
    }

    /// The character half of `isBundleID`, apart so that a reader that refuses an ID can tell the
    /// sender which half it broke (too long, or the wrong characters).
    public static func hasBundleIDCharactersOnly(_ text: String) -> Bool {
        text.utf8.allSatisfy { byte in
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
