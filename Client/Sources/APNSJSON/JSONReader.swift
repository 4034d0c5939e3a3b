/// A small, strict JSON reader for job bodies (its values: `JSONValue.swift`).
///
/// Why not `JSONSerialization`: a job body comes from another system and must never crash or
/// stall the worker. This reader bounds nesting depth (no unbounded recursion), validates UTF-8
/// with a byte offset in the error, rejects duplicate object keys (so what we validate is what
/// Apple sees), keeps integers exact, and reports where each top-level member's value lies in the
/// body so the payload can be sent to Apple with its original key order and lexemes.

@_spi(APNSWorker) public enum JSONReader {
    /// Offset of the first byte that is not part of well-formed UTF-8, or nil when all of it is.
    /// Rejects overlong forms, surrogates and code points above U+10FFFF, as RFC 3629 requires.
    @_spi(APNSWorker) public static func firstInvalidUTF8Offset(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        var i = 0
        let n = bytes.count
        while i < n {
            // Job bodies are almost all ASCII: skip eight such bytes at a time.
            while i + 8 <= n,
                UnsafeRawPointer(bytes.baseAddress! + i).loadUnaligned(as: UInt64.self) & 0x8080_8080_8080_8080 == 0
            {
                i += 8
            }
            guard i < n else { break }
            let b0 = bytes[i]
            if b0 < 0x80 { i += 1; continue }
            let need: Int
            var lower: UInt8 = 0x80
            var upper: UInt8 = 0xBF
            switch b0 {
            case 0xC2...0xDF: need = 1
            case 0xE0: need = 2; lower = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: need = 2
            case 0xED: need = 2; upper = 0x9F
            case 0xF0: need = 3; lower = 0x90
            case 0xF1...0xF3: need = 3
            case 0xF4: need = 3; upper = 0x8F
            default: return i
            }
            guard i + need < n else { return i }
            let b1 = bytes[i + 1]
            guard b1 >= lower && b1 <= upper else { return i }
            var k = 2
            while k <= need {
                guard bytes[i + k] & 0xC0 == 0x80 else { return i }
                k += 1
            }
            i += need + 1
        }
        return nil
    }

    /// Parses a body whose top level must be an object. The body must already be valid UTF-8.
    /// The member named `skimming` (a job's `payload`) is checked but not built: see JSONSkim.swift.
    @_spi(APNSWorker) public static func parseTopLevelObject(
        _ bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int, skimming skimmedKey: String? = nil
    ) throws(JSONSyntaxError) -> JSONTopLevelObject {
        var parser = Parser(bytes: bytes, maxDepth: maxDepth)
        parser.skipWhitespace()
        guard parser.peek() == UInt8(ascii: "{") else {
            if parser.index >= bytes.count { throw parser.error("the body is empty") }
            throw parser.error("the body must be a JSON object")
        }
        parser.index += 1
        var object = JSONTopLevelObject()
        // Room for a typical job's members and payload keys up front: growing from empty cost
        // three allocations each per job (`perf record -e probe_libc:malloc`, docs/benchmarks.md).
        var keys: [Parser.KeyRef] = []
        keys.reserveCapacity(JSONTopLevelObject.typicalMembers)
        parser.skipWhitespace()
        if parser.peek() == UInt8(ascii: "}") {
            parser.index += 1
        } else {
            while true {
                parser.skipWhitespace()
                let keyOffset = parser.index
                let key = try parser.parseKey()
                try parser.expect(UInt8(ascii: ":"))
                parser.skipWhitespace()
                let start = parser.index
                let whitespaceBefore = parser.whitespaceSkipped
                if key == skimmedKey {
                    var summary = JSONPayloadSummary()
                    summary.kind = try parser.skimValue(depth: 1, role: .payload, summary: &summary, keys: &keys)
                    if object.skimmed != nil {
                        throw .duplicateKey(key, at: keyOffset)
                    }
                    object.skimmed = JSONSkimmedMember(
                        summary: summary, range: start..<parser.index, hasWhitespace: parser.whitespaceSkipped != whitespaceBefore)
                } else {
                    let value = try parser.parseValue(depth: 1)
                    let member = JSONTopLevelMember(
                        value: value, range: start..<parser.index, hasWhitespace: parser.whitespaceSkipped != whitespaceBefore)
                    guard object.add(key, member) else {
                        throw .duplicateKey(key, at: keyOffset)
                    }
                }
                parser.skipWhitespace()
                if try parser.endOfContainer(closing: UInt8(ascii: "}")) { break }
            }
        }
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.error("unexpected data after the top-level object") }
        return object
    }

    /// Parses any single JSON value (tests and tools).
    static func parseValue(_ bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) throws(JSONSyntaxError) -> JSONValue {
        var parser = Parser(bytes: bytes, maxDepth: maxDepth)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.error("unexpected data after the value") }
        return value
    }

    /// The JSON text in `bytes` with every whitespace byte outside strings removed. Key order,
    /// escapes and number lexemes are kept exactly. `bytes` must be valid JSON.
    @_spi(APNSWorker) public static func compact(_ bytes: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        // Copies runs between whitespace bytes in bulk; inside strings nothing is dropped.
        var runStart = 0
        var inString = false
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if inString {
                if b == UInt8(ascii: "\\") { i += 2; continue }
                if b == UInt8(ascii: "\"") { inString = false }
                i += 1
                continue
            }
            switch b {
            case 0x20, 0x09, 0x0A, 0x0D:
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i]))
                i += 1
                runStart = i
            case UInt8(ascii: "\""):
                inString = true
                i += 1
            default:
                i += 1
            }
        }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<bytes.count]))
        return out
    }

    struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        let maxDepth: Int
        var index = 0
        /// Whitespace bytes skipped between tokens so far.
        var whitespaceSkipped = 0

        init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
            self.bytes = bytes
            self.maxDepth = maxDepth
        }

        func error(_ message: String) -> JSONSyntaxError {
            JSONSyntaxError(offset: index, message: message)
        }

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D:
                    index += 1
                    whitespaceSkipped += 1
                default: return
                }
            }
        }

        mutating func expect(_ byte: UInt8) throws(JSONSyntaxError) {
            skipWhitespace()
            guard peek() == byte else {
                throw error("expected '\(Character(Unicode.Scalar(byte)))'")
            }
            index += 1
        }

        /// After a member or element: true at the closing bracket, false after a comma.
        mutating func endOfContainer(closing: UInt8) throws(JSONSyntaxError) -> Bool {
            guard let b = peek() else { throw error("unexpected end of the body") }
            index += 1
            if b == closing { return true }
            if b == UInt8(ascii: ",") { return false }
            index -= 1
            throw error("expected ',' or '\(Character(Unicode.Scalar(closing)))'")
        }

        mutating func parseKey() throws(JSONSyntaxError) -> String {
            guard peek() == UInt8(ascii: "\"") else { throw error("expected a string key") }
            return try parseString()
        }

        mutating func parseValue(depth: Int) throws(JSONSyntaxError) -> JSONValue {
            guard let b = peek() else { throw error("unexpected end of the body") }
            switch b {
            case UInt8(ascii: "{"):
                guard depth < maxDepth else { throw error("nesting deeper than \(maxDepth) levels") }
                index += 1
                var members: [String: JSONValue] = [:]
                skipWhitespace()
                if peek() == UInt8(ascii: "}") { index += 1; return .object(members) }
                while true {
                    skipWhitespace()
                    let keyOffset = index
                    let key = try parseKey()
                    try expect(UInt8(ascii: ":"))
                    skipWhitespace()
                    let value = try parseValue(depth: depth + 1)
                    if members.updateValue(value, forKey: key) != nil {
                        throw .duplicateKey(key, at: keyOffset)
                    }
                    skipWhitespace()
                    if try endOfContainer(closing: UInt8(ascii: "}")) { return .object(members) }
                }
            case UInt8(ascii: "["):
                guard depth < maxDepth else { throw error("nesting deeper than \(maxDepth) levels") }
                index += 1
                var elements: [JSONValue] = []
                skipWhitespace()
                if peek() == UInt8(ascii: "]") { index += 1; return .array(elements) }
                while true {
                    skipWhitespace()
                    elements.append(try parseValue(depth: depth + 1))
                    skipWhitespace()
                    if try endOfContainer(closing: UInt8(ascii: "]")) { return .array(elements) }
                }
            case UInt8(ascii: "\""):
                return .string(try parseString())
            case UInt8(ascii: "t"):
                try literal("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try literal("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try literal("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return try parseNumber()
            default:
                throw error("unexpected character")
            }
        }

        mutating func literal(_ word: StaticString) throws(JSONSyntaxError) {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw error("invalid literal") }
            let expected = UnsafeBufferPointer(start: word.utf8Start, count: count)
            for k in 0..<count where bytes[index + k] != expected[k] {
                throw error("invalid literal")
            }
            index += count
        }

        mutating func parseNumber() throws(JSONSyntaxError) -> JSONValue {
            let start = index
            var isInteger = true
            if peek() == UInt8(ascii: "-") { index += 1 }
            guard let first = peek(), first >= UInt8(ascii: "0"), first <= UInt8(ascii: "9") else {
                throw error("invalid number")
            }
            if first == UInt8(ascii: "0") {
                index += 1
            } else {
                skipDigits()
            }
            if peek() == UInt8(ascii: ".") {
                isInteger = false
                index += 1
                guard skipDigits() > 0 else { throw error("invalid number: digits expected after '.'") }
            }
            if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
                isInteger = false
                index += 1
                if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
                guard skipDigits() > 0 else { throw error("invalid number: digits expected in the exponent") }
            }
            // Numbers are ASCII, and the body is valid UTF-8, so this slice decodes as is.
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            if isInteger, let exact = Int64(text) { return .integer(exact) }
            guard let d = Double(text), d.isFinite else {
                throw JSONSyntaxError(offset: start, message: "number out of range")
            }
            return .number(d)
        }

        @discardableResult
        mutating func skipDigits() -> Int {
            let start = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                index += 1
            }
            return index - start
        }

        /// At an opening quote. Fast path: no escapes, one slice decoded (UTF-8 already checked).
        mutating func parseString() throws(JSONSyntaxError) -> String {
            index += 1
            let start = index
            skipPlainStringBytes()
            while index < bytes.count {
                let b = bytes[index]
                if b == UInt8(ascii: "\"") {
                    let s = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                    index += 1
                    return s
                }
                if b == UInt8(ascii: "\\") { return try parseEscapedString(from: start) }
                if b < 0x20 { throw error("control character in a string") }
                index += 1
            }
            throw JSONSyntaxError(offset: start - 1, message: "unterminated string")
        }

        /// Skips eight bytes at a time while none of them is a quote, a backslash or a control
        /// character (the classic "has a zero byte" / "has a byte less than n" word tests; they
        /// never miss a match, and a false alarm only hands over to the byte loop early).
        mutating func skipPlainStringBytes() {
            guard let base = bytes.baseAddress else { return }
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highBits: UInt64 = 0x8080_8080_8080_8080
            while index + 8 <= bytes.count {
                let word = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
                let quotes = word ^ (ones &* 0x22)
                let backslashes = word ^ (ones &* 0x5C)
                let special = ((quotes &- ones) & ~quotes) | ((backslashes &- ones) & ~backslashes)
                    | ((word &- ones &* 0x20) & ~word)
                if special & highBits != 0 { return }
                index += 8
            }
        }

        mutating func parseEscapedString(from start: Int) throws(JSONSyntaxError) -> String {
            var utf8 = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
            while index < bytes.count {
                let b = bytes[index]
                if b == UInt8(ascii: "\"") {
                    index += 1
                    return String(decoding: utf8, as: UTF8.self)
                }
                if b < 0x20 { throw error("control character in a string") }
                if b != UInt8(ascii: "\\") {
                    utf8.append(b)
                    index += 1
                    continue
                }
                index += 1
                guard let e = peek() else { break }
                index += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(e)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard peek() == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else {
                            throw error("unpaired surrogate in a \\u escape")
                        }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate in a \\u escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw error("unpaired surrogate in a \\u escape")
                    }
                    guard let us = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                    UTF8.encode(us) { utf8.append($0) }
                default:
                    index -= 1
                    throw error("invalid escape sequence")
                }
            }
            throw JSONSyntaxError(offset: start - 1, message: "unterminated string")
        }

        mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw error("truncated \\u escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let c = bytes[index]
                let d: UInt32
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
                default: throw error("invalid hex digit in a \\u escape")
                }
                v = v << 4 | d
                index += 1
            }
            return v
        }
    }
}
