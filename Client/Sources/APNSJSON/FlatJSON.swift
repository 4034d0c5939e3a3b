/// Writes the small flat JSON objects the worker makes itself (a provider token's header and
/// claims, a feedback event): string, integer and null members, keys in byte order. Not
/// `JSONSerialization` with `.sortedKeys`: on Linux it sorts keys through an ICU collator, and
/// loading the collator's data was megabytes of the worker's resident memory for two objects.
public enum FlatJSON {
    public enum Value: Sendable, Hashable {
        case string(String)
        case integer(Int64)
        case null
    }

    /// `{"key":value,…}` with the keys sorted by their UTF-8 bytes.
    public static func object(_ members: [String: Value]) -> [UInt8] {
        var writer = Writer()
        for key in members.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) { writer.member(key, members[key]!) }
        return writer.finish()
    }

    /// One object written in one pass, member by member in the caller's order: for an object
    /// made per job (a delivery event), whose keys are fixed, without the dictionary and the
    /// sort of `object`. The caller keeps the order it promises (byte order, as `object`'s).
    public struct Writer {
        private var out: [UInt8]

        public init(capacity: Int = 64) {
            out = []
            out.reserveCapacity(capacity)
            out.append(UInt8(ascii: "{"))
        }

        /// A string member, `null` when nil. `key`: a literal that needs no escaping.
        public mutating func member(_ key: StaticString, _ value: String?) {
            literalKey(key)
            if let value { FlatJSON.appendString(value, to: &out) } else { out.append(contentsOf: "null".utf8) }
        }

        /// An integer member. `key`: a literal that needs no escaping.
        public mutating func member(_ key: StaticString, _ value: Int) {
            literalKey(key)
            out.append(contentsOf: String(value).utf8)
        }

        /// Any member, its key escaped.
        public mutating func member(_ key: String, _ value: Value) {
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            FlatJSON.appendString(key, to: &out)
            out.append(UInt8(ascii: ":"))
            switch value {
            case .string(let text): FlatJSON.appendString(text, to: &out)
            case .integer(let number): out.append(contentsOf: String(number).utf8)
            case .null: out.append(contentsOf: "null".utf8)
            }
        }

        /// The object, closed.
        public consuming func finish() -> [UInt8] {
            out.append(UInt8(ascii: "}"))
            return out
        }

        private mutating func literalKey(_ key: StaticString) {
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "\""))
            key.withUTF8Buffer { out.append(contentsOf: $0) }
            out.append(contentsOf: #"":"#.utf8)
        }
    }

    /// Lower-case, as `LowercaseHex` writes them (that one lives in APNSModel, above this module).
    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// A JSON string (RFC 8259 §7): quote, backslash and control characters escaped.
    static func appendString(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case UInt8(ascii: "\n"): out.append(contentsOf: #"\n"#.utf8)
            case UInt8(ascii: "\r"): out.append(contentsOf: #"\r"#.utf8)
            case UInt8(ascii: "\t"): out.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20:
                out.append(contentsOf: #"\u00"#.utf8)
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
