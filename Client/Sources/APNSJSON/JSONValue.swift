/// The JSON value type the job reader (`JSONReader`) produces, its syntax error, and the
/// top-level object of a job body as a list of members.

/// A JSON value. Integers that fit `Int64` and have no fraction or exponent stay exact.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// The member `key` of an object; nil for a missing key or a non-object.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var integerValue: Int64? {
        if case .integer(let i) = self { return i }
        return nil
    }

    /// The value as a whole number that fits `Int64`, however it is written: `10`, `10.0` and
    /// `1e1` alike. The contract's integer fields follow JSON Schema's "integer" (any number
    /// whose fraction is zero), so that what docs/schemas/ accepts the parsers accept too;
    /// nil for a fraction, a value beyond `Int64` or anything but a number.
    public var wholeNumberValue: Int64? {
        switch self {
        case .integer(let i): return i
        case .number(let d): return Int64(exactly: d)
        default: return nil
        }
    }

    /// The JSON type name, for error messages ("expected an integer, got a string").
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .integer: return "an integer"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }
}

/// Why a text is not acceptable JSON. `offset` is the byte offset of the fault.
public struct JSONSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    public var offset: Int
    public var message: String

    public init(offset: Int, message: String) {
        self.offset = offset
        self.message = message
    }

    public var description: String { "invalid JSON at byte \(offset): \(message)" }

    /// A key met twice in one object. The key is quoted line-safe: it comes from the body, and
    /// the refusal is printed to terminals and logs.
    static func duplicateKey(_ key: String, at offset: Int) -> JSONSyntaxError {
        JSONSyntaxError(offset: offset, message: "duplicate key \"\(LineSafeText.quoted(key, limit: 80))\"")
    }
}

extension JSONValue {
    /// Parses one JSON text with the same strict reader as job bodies: UTF-8 checked, nesting
    /// bounded by `maxDepth`, duplicate keys refused. (The simulator checks payloads with it.)
    public init(parsing bytes: [UInt8], maxDepth: Int = 64) throws(JSONSyntaxError) {
        self = try bytes.withUnsafeBufferPointer { buffer throws(JSONSyntaxError) in
            if let bad = JSONReader.firstInvalidUTF8Offset(buffer) {
                throw JSONSyntaxError(offset: bad, message: "not valid UTF-8")
            }
            return try JSONReader.parseValue(buffer, maxDepth: maxDepth)
        }
    }
}

/// A top-level object: its members, and the one member read without being built, if asked for.
/// The members are a list, not a dictionary: a job has about ten, and hashing their keys was the
/// largest single cost of parsing a job (`perf`, docs/benchmarks.md).
@_spi(APNSWorker) public struct JSONTopLevelObject {
    private(set) var members: [(key: String, member: JSONTopLevelMember)] = []
    @_spi(APNSWorker) public var skimmed: JSONSkimmedMember?
    /// Every key, once there are more than `linearLimit`: a hostile body of thousands of keys
    /// stays linear to check for duplicates.
    private var keys: Set<String>?
    private static var linearLimit: Int { 16 }
    /// Members reserved up front (a job has about ten).
    static var typicalMembers: Int { 16 }

    init() { members.reserveCapacity(Self.typicalMembers) }

    @_spi(APNSWorker) public subscript(key: String) -> JSONTopLevelMember? {
        for entry in members where entry.key == key { return entry.member }
        return nil
    }

    /// Adds a member; false (and nothing added) when the key is already there.
    mutating func add(_ key: String, _ member: JSONTopLevelMember) -> Bool {
        if keys != nil {
            guard keys!.insert(key).inserted else { return false }
        } else {
            guard self[key] == nil else { return false }
            if members.count == Self.linearLimit { keys = Set(members.map(\.key) + [key]) }
        }
        members.append((key, member))
        return true
    }
}

/// One member of the top-level object: its value and where the value's bytes lie in the body.
@_spi(APNSWorker) public struct JSONTopLevelMember {
    @_spi(APNSWorker) public var value: JSONValue
    @_spi(APNSWorker) public var range: Range<Int>
    /// Whether the value's text holds whitespace between tokens (so `compact` would change it).
    @_spi(APNSWorker) public var hasWhitespace: Bool
}
