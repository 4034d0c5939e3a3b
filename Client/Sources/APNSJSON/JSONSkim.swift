/// Reading a job's payload without building it (the job hot path).
///
/// A job needs from its payload only whether it is an object, whether `aps` is an object, and
/// which of four `aps` keys are present; the payload itself goes to Apple as the body's own bytes.
/// Building a `JSONValue` tree for it cost a dictionary and a string per member on every job.
/// The skimmer here checks exactly what `Parser.parseValue` checks (UTF-8 aside, which the caller
/// has done: syntax, depth, escapes, number range, duplicate keys under `String` equality) with
/// the same messages and offsets, and allocates only for escaped or non-ASCII keys and for
/// objects of more than `linearKeyLimit` members.

/// What kind of value the skimmer passed over, with an integer's value (for `content-available`).
@_spi(APNSWorker) public enum JSONKind: Equatable {
    case null, bool, integer(Int64), number, string, array, object

    /// The same names as `JSONValue.typeName`, for the same error messages.
    @_spi(APNSWorker) public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .integer: "an integer"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

/// What a job's payload holds, as far as the job parser asks.
@_spi(APNSWorker) public struct JSONPayloadSummary {
    /// The payload's own kind.
    @_spi(APNSWorker) public var kind: JSONKind = .null
    /// The kind of its `aps` member; nil when it has none (or is no object).
    @_spi(APNSWorker) public var aps: JSONKind?
    /// `aps` members present (a `null` value counts as present, as a key in a dictionary would).
    @_spi(APNSWorker) public var apsHasAlert = false, apsHasSound = false, apsHasBadge = false
    /// `aps.content-available` is the integer 1.
    @_spi(APNSWorker) public var contentAvailableIsOne = false
}

/// The top-level `payload` member of a job, skimmed.
@_spi(APNSWorker) public struct JSONSkimmedMember {
    @_spi(APNSWorker) public var summary: JSONPayloadSummary
    @_spi(APNSWorker) public var range: Range<Int>
    @_spi(APNSWorker) public var hasWhitespace: Bool
}

extension JSONReader.Parser {
    /// Where an object key lies in the body. `plain`: no escape and ASCII only, so its bytes
    /// compare as its `String` would.
    struct KeyRef {
        var range: Range<Int>
        var plain: Bool
    }

    /// Up to this many members an object's keys are checked for duplicates pair by pair, in
    /// place; past it, through a `Set` (a hostile body of thousands of keys stays linear).
    static var linearKeyLimit: Int { 16 }

    /// The member's role in a job payload, so the skimmer notes what the job parser asks about.
    enum SkimRole { case other, payload, aps }

    /// Skims one value; `summary` collects what the payload's role asks about.
    mutating func skimValue(depth: Int, role: SkimRole, summary: inout JSONPayloadSummary, keys: inout [KeyRef]) throws(JSONSyntaxError) -> JSONKind {
        guard let b = peek() else { throw error("unexpected end of the body") }
        switch b {
        case UInt8(ascii: "{"):
            guard depth < maxDepth else { throw error("nesting deeper than \(maxDepth) levels") }
            index += 1
            skipWhitespace()
            if peek() == UInt8(ascii: "}") { index += 1; return .object }
            let firstKey = keys.count
            var overflow: Set<String>? = nil
            defer { keys.removeSubrange(firstKey...) }
            while true {
                skipWhitespace()
                let keyOffset = index
                let key = try skimKey()
                try expect(UInt8(ascii: ":"))
                skipWhitespace()
                let childRole: SkimRole = role == .payload && equals(key, "aps") ? .aps : .other
                let kind = try skimValue(depth: depth + 1, role: childRole, summary: &summary, keys: &keys)
                // After the value, as `parseValue` checks: a fault inside it is reported first.
                try noteKey(key, at: keyOffset, firstKey: firstKey, keys: &keys, overflow: &overflow)
                if childRole == .aps { summary.aps = kind }
                if role == .aps { noteApsMember(key, kind, &summary) }
                skipWhitespace()
                if try endOfContainer(closing: UInt8(ascii: "}")) { return .object }
            }
        case UInt8(ascii: "["):
            guard depth < maxDepth else { throw error("nesting deeper than \(maxDepth) levels") }
            index += 1
            skipWhitespace()
            if peek() == UInt8(ascii: "]") { index += 1; return .array }
            while true {
                skipWhitespace()
                _ = try skimValue(depth: depth + 1, role: .other, summary: &summary, keys: &keys)
                skipWhitespace()
                if try endOfContainer(closing: UInt8(ascii: "]")) { return .array }
            }
        case UInt8(ascii: "\""):
            _ = try skimKey()
            return .string
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            if case .integer(let value) = try parseNumber() { return .integer(value) }
            return .number
        default:
            throw error("unexpected character")
        }
    }

    /// At an opening quote: checks the string as `parseString` does and says where its
    /// contents lie. Only an escaped string is decoded (and dropped).
    mutating func skimKey() throws(JSONSyntaxError) -> KeyRef {
        guard peek() == UInt8(ascii: "\"") else { throw error("expected a string key") }
        index += 1
        let start = index
        var ascii = true
        skipPlainStringBytes()
        while index < bytes.count {
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                index += 1
                return KeyRef(range: start..<(index - 1), plain: ascii && isASCII(start..<(index - 1)))
            }
            if b == UInt8(ascii: "\\") {
                _ = try parseEscapedString(from: start)
                return KeyRef(range: start..<(index - 1), plain: false)
            }
            if b < 0x20 { throw error("control character in a string") }
            if b >= 0x80 { ascii = false }
            index += 1
        }
        throw JSONSyntaxError(offset: start - 1, message: "unterminated string")
    }

    /// The bytes `skipPlainStringBytes` passed over were checked for quotes and controls only.
    private func isASCII(_ range: Range<Int>) -> Bool {
        for i in range where bytes[i] >= 0x80 { return false }
        return true
    }

    /// The key's text, decoded (escapes resolved), for comparisons that need `String` rules.
    func decodedKey(_ key: KeyRef) -> String {
        var copy = self
        copy.index = key.range.lowerBound - 1
        return (try? copy.parseString()) ?? ""
    }

    func equals(_ key: KeyRef, _ literal: StaticString) -> Bool {
        guard key.plain else { return decodedKey(key) == literal.description }
        guard key.range.count == literal.utf8CodeUnitCount else { return false }
        let expected = UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
        for (k, i) in key.range.enumerated() where bytes[i] != expected[k] { return false }
        return true
    }

    func sameKey(_ a: KeyRef, _ b: KeyRef) -> Bool {
        if a.plain && b.plain {
            guard a.range.count == b.range.count else { return false }
            return zip(a.range, b.range).allSatisfy { bytes[$0] == bytes[$1] }
        }
        return decodedKey(a) == decodedKey(b)
    }

    /// Refuses a key the object already has, as `parseValue`'s dictionary does.
    func noteKey(_ key: KeyRef, at offset: Int, firstKey: Int, keys: inout [KeyRef], overflow: inout Set<String>?) throws(JSONSyntaxError) {
        if overflow != nil {
            guard overflow!.insert(decodedKey(key)).inserted else { throw .duplicateKey(decodedKey(key), at: offset) }
            return
        }
        for earlier in keys[firstKey...] where sameKey(earlier, key) { throw .duplicateKey(decodedKey(key), at: offset) }
        keys.append(key)
        if keys.count - firstKey > Self.linearKeyLimit {
            overflow = Set(keys[firstKey...].map(decodedKey))
        }
    }

    func noteApsMember(_ key: KeyRef, _ kind: JSONKind, _ summary: inout JSONPayloadSummary) {
        if equals(key, "alert") { summary.apsHasAlert = true }
        else if equals(key, "sound") { summary.apsHasSound = true }
        else if equals(key, "badge") { summary.apsHasBadge = true }
        else if equals(key, "content-available") { summary.contentAvailableIsOne = kind == .integer(1) }
    }
}
