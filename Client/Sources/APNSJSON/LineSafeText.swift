/// Text from outside as a line a person reads may show it: a log line, an error, a delivery
/// event's line. It lives in the lowest module so that the JSON reader's errors, which quote keys
/// taken from a body, follow the same rule as every module above it.
public enum LineSafeText {
    /// A control character (Unicode category Cc: U+0000 to U+001F and U+007F to U+009F).
    public static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// A character that must not reach such a line: a control character, which can move a
    /// terminal's cursor, or Unicode's line and paragraph separators, which start a line that
    /// can pass for the worker's own.
    public static func breaksALine(_ scalar: Unicode.Scalar) -> Bool {
        isControl(scalar) || scalar == "\u{2028}" || scalar == "\u{2029}"
    }

    /// `text` as a line may quote it: its first `limit` characters, each that `breaksALine`
    /// replaced by `?`, and `…` where it was cut.
    public static func quoted(_ text: String, limit: Int) -> String {
        var out = ""
        for scalar in text.unicodeScalars.prefix(limit) {
            out.unicodeScalars.append(breaksALine(scalar) ? "?" : scalar)
        }
        if text.unicodeScalars.count > limit { out += "…" }
        return out
    }
}
