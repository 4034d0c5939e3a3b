import Foundation

/// A value in an AMQP field table (headers, arguments), as RabbitMQ sends and accepts them.
public enum AMQPFieldValue: Sendable, Hashable {
    case bool(Bool)
    case int8(Int8)
    case int16(Int16)
    case int32(Int32)
    case int64(Int64)
    case float(Float)
    case double(Double)
    case decimal(scale: UInt8, value: UInt32)
    case string(String)
    /// A byte string (`x` in RabbitMQ's table grammar), for values that are not UTF-8.
    case bytes([UInt8])
    case timestamp(Date)
    case table(AMQPTable)
    case array([AMQPFieldValue])
    case void

    /// The value as a string, when it is one (or bytes that are UTF-8).
    public var stringValue: String? {
        switch self {
        case .string(let s): return s
        case .bytes(let b): return String(validating: b, as: UTF8.self)
        default: return nil
        }
    }

    /// The value as an integer, for any integer width.
    public var intValue: Int64? {
        switch self {
        case .int8(let v): return Int64(v)
        case .int16(let v): return Int64(v)
        case .int32(let v): return Int64(v)
        case .int64(let v): return v
        default: return nil
        }
    }

    /// The value as a count (contract §4): an integer of any width, or a decimal string, from 0
    /// to 2^31−1; anything else is nil. The one reading of a count in a header (`JobEnvelope`).
    public var countValue: Int? {
        let number: Int64?
        if let int = intValue {
            number = int
        } else if let string = stringValue, string.utf8.count <= 11 {
            number = Int64(string)
        } else {
            number = nil
        }
        guard let number, (0...Int64(Int32.max)).contains(number) else { return nil }
        return Int(number)
    }

    /// Which of two entries of one key a decoded table keeps (contract §4: a header that appears
    /// more than once counts as the largest of its values, so a publisher's extra entry can never
    /// lower a count the broker keeps in the first one): the larger count, a count over anything
    /// that is none, else the later entry.
    static func kept(ofRepeated earlier: AMQPFieldValue, _ later: AMQPFieldValue) -> AMQPFieldValue {
        switch (earlier.countValue, later.countValue) {
        case let (a?, b?): b >= a ? later : earlier
        case (_?, nil): earlier
        case (nil, _): later
        }
    }
}

/// An AMQP field table. Order is not significant on the wire; a dictionary keeps look-ups simple.
public typealias AMQPTable = [String: AMQPFieldValue]

/// A short-string property value (`message_id`, `type`, `app_id`…) as the bytes that arrived.
///
/// A publisher may send any bytes there. Decoding them as UTF-8 with U+FFFD would change them
/// and could grow them past a short string's 255 bytes, so a republished copy (a retry, a dead
/// letter) could no longer be encoded (contract §4 "The AMQP envelope is input too"). Valid
/// UTF-8, the usual case, is kept as a `String` (no second copy); anything else as its bytes.
/// Equal when the bytes are equal.
public struct AMQPShortString: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    private enum Storage: Sendable {
        case text(String)
        case raw([UInt8])
    }

    private let storage: Storage

    public init(_ text: String) { storage = .text(text) }

    public init(stringLiteral value: String) { self.init(value) }

    /// The bytes as they arrived, kept as text when they are UTF-8.
    public init(bytes: some Collection<UInt8>) {
        if let text = String(validating: bytes, as: UTF8.self) { storage = .text(text) } else { storage = .raw(Array(bytes)) }
    }

    /// The value's bytes, exactly as received or set.
    public var bytes: [UInt8] {
        switch storage {
        case .text(let text): Array(text.utf8)
        case .raw(let bytes): bytes
        }
    }

    public var byteCount: Int {
        switch storage {
        case .text(let text): text.utf8.count
        case .raw(let bytes): bytes.count
        }
    }

    /// The value when it is UTF-8, else nil.
    public var utf8Text: String? {
        if case .text(let text) = storage { return text }
        return nil
    }

    /// The value as text for readers that need some: bytes that are not UTF-8 become U+FFFD.
    /// Not for logs as it is: it may hold control characters (`logSafe`).
    public var text: String {
        switch storage {
        case .text(let text): text
        case .raw(let bytes): String(decoding: bytes, as: UTF8.self)
        }
    }

    /// Text for one log line: control characters (CR, LF, NUL, ESC, C1…) written as `\u{…}`,
    /// bytes that are not UTF-8 as U+FFFD, at most `limit` characters.
    public func logSafe(limit: Int = 255) -> String { Self.logSafe(text, limit: limit) }

    /// `text` with control characters escaped and cut at `limit` characters: for a log line.
    public static func logSafe(_ text: String, limit: Int = 255) -> String {
        var out = ""
        for scalar in text.unicodeScalars.prefix(limit) {
            if scalar.properties.generalCategory == .control || scalar == "\u{2028}" || scalar == "\u{2029}" {
                out += "\\u{" + String(scalar.value, radix: 16) + "}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Calls `body` with the bytes, without copying them when they are text.
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        switch storage {
        case .text(var text): return text.withUTF8 { body(UnsafeRawBufferPointer($0)) }
        case .raw(let bytes): return bytes.withUnsafeBytes(body)
        }
    }

    public var description: String { logSafe() }

    public static func == (lhs: AMQPShortString, rhs: AMQPShortString) -> Bool {
        switch (lhs.storage, rhs.storage) {
        // Not String's ==: that one holds canonically equivalent texts equal, not equal bytes.
        case (.text(let a), .text(let b)): a.utf8.elementsEqual(b.utf8)
        case (.raw(let a), .raw(let b)): a == b
        default: false  // one is UTF-8, the other is not
        }
    }

    public func hash(into hasher: inout Hasher) {
        withBytes { hasher.combine(bytes: $0) }
    }
}

/// The AMQP `basic` content properties the worker reads and writes.
///
/// A value type whose fields live in one shared, copy-on-write reference: a delivery is copied
/// several times on its way through the worker (into the job's context, into the closures that
/// settle it), and copying thirteen optional fields one by one was a measurable share of the
/// worker's reference counting.
///
/// Short strings are kept as the bytes that arrived (`AMQPShortString`), so a republished copy is
/// the same byte for byte. The `String` accessors are views for readers that need text: bytes that
/// are not UTF-8 read as U+FFFD there; `shortString(_:)` gives the bytes themselves. A received
/// header table is kept as its bytes too, beside the decoded `headers` (see there). Equality
/// compares the decoded view, not those bytes.
public struct AMQPProperties: Sendable, Hashable {
    /// The short-string properties, for `shortString(_:)` and `setShortString(_:_:)`.
    public enum ShortStringField: Sendable, CaseIterable {
        case contentType, contentEncoding, correlationID, replyTo, expiration, messageID, type, userID, appID
    }

    /// The largest properties (headers included) of a message the worker handles, encoded
    /// (contract §4): a message with larger ones is malformed. A content header is never split,
    /// so this is also what keeps a republished copy within any broker's frame.
    public static let maximumEncodedSize = 16 * 1024

    /// The deepest header table (tables and arrays within tables) a message the worker handles
    /// may carry: a deeper one is malformed and not kept, like properties over
    /// `maximumEncodedSize`. Decoding, re-encoding, comparing and freeing a table recurse once
    /// per level, on the owner thread and on whichever task republishes a copy; 16 KiB would
    /// otherwise nest ~2,700 levels, and RabbitMQ's 128 KiB frame ~20,000 (which overflowed a
    /// thread's 8 MiB stack encoding it, NestedHeaderEndToEndTests).
    public static let maximumHeaderDepth = 32

    private struct Fields: Sendable, Hashable {
        var contentType: AMQPShortString?
        var contentEncoding: AMQPShortString?
        var headers: AMQPTable?
        /// The header table as it arrived, when it was kept (`ReceivedHeaderTable`). Not
        /// compared: properties built by hand equal the same properties received.
        @NotCompared var receivedHeaders: ReceivedHeaderTable? = nil
        var deliveryMode: UInt8?
        var priority: UInt8?
        var correlationID: AMQPShortString?
        var replyTo: AMQPShortString?
        var expiration: AMQPShortString?
        var messageID: AMQPShortString?
        var timestamp: Date?
        var type: AMQPShortString?
        var userID: AMQPShortString?
        var appID: AMQPShortString?

        func value(_ field: ShortStringField) -> AMQPShortString? {
            switch field {
            case .contentType: contentType
            case .contentEncoding: contentEncoding
            case .correlationID: correlationID
            case .replyTo: replyTo
            case .expiration: expiration
            case .messageID: messageID
            case .type: type
            case .userID: userID
            case .appID: appID
            }
        }

        mutating func set(_ field: ShortStringField, _ value: AMQPShortString?) {
            switch field {
            case .contentType: contentType = value
            case .contentEncoding: contentEncoding = value
            case .correlationID: correlationID = value
            case .replyTo: replyTo = value
            case .expiration: expiration = value
            case .messageID: messageID = value
            case .type: type = value
            case .userID: userID = value
            case .appID: appID = value
            }
        }
    }

    private var storage: SharedFields<Fields>

    private mutating func change(_ body: (inout Fields) -> Void) { SharedFields.change(&storage, body) }

    /// A short-string property as the bytes that arrived.
    public func shortString(_ field: ShortStringField) -> AMQPShortString? { storage.fields.value(field) }

    /// Sets a short-string property to exactly these bytes (nil removes it).
    public mutating func setShortString(_ field: ShortStringField, _ value: AMQPShortString?) {
        change { $0.set(field, value) }
    }

    private func text(_ field: ShortStringField) -> String? { storage.fields.value(field)?.text }

    private mutating func setText(_ field: ShortStringField, _ text: String?) {
        change { $0.set(field, text.map { AMQPShortString($0) }) }
    }

    public var contentType: String? {
        get { text(.contentType) }
        set { setText(.contentType, newValue) }
    }
    public var contentEncoding: String? {
        get { text(.contentEncoding) }
        set { setText(.contentEncoding, newValue) }
    }
    /// The header table, decoded. On a received message this is a view of the table's bytes,
    /// which are kept too: a copy the worker republishes sends those bytes unchanged, less the
    /// entries of every key set, changed or removed here, which go out with the view's values
    /// after them (contract §4, byte for byte; `setHeaders(_:writing:)`).
    public var headers: AMQPTable? {
        get { storage.fields.headers }
        set {
            change { fields in
                let old = fields.headers
                fields.receivedHeaders?.noteChanges(from: old, to: newValue)
                fields.headers = newValue
            }
        }
    }

    /// Sets the headers, naming the keys the worker writes on this copy even where their value
    /// stays the same: every received entry of such a key is replaced by the view's (so a copy
    /// never carries a publisher's second value for a header the worker writes).
    public mutating func setHeaders(_ headers: AMQPTable?, writing keys: some Sequence<String>) {
        change { fields in
            if fields.receivedHeaders != nil {
                let old = fields.headers
                fields.receivedHeaders?.noteChanges(from: old, to: headers)
                fields.receivedHeaders?.written.formUnion(keys)
            }
            fields.headers = headers
        }
    }

    /// The header table's bytes as they arrived (4-byte length first), when they were kept; nil
    /// for properties the worker made, or whose table it did not keep (over the size or depth bound).
    public var receivedHeaderTable: [UInt8]? { storage.fields.receivedHeaders?.bytes }

    /// Sets the headers to a table given as its bytes on the wire (4-byte length first), as if
    /// received: they go out unchanged, the worker's own headers after them. For publishing a
    /// table a dictionary cannot hold (duplicate keys, unsigned kinds, order); false, and nothing
    /// changed, when librabbitmq cannot decode them or they nest deeper than `maximumHeaderDepth`.
    @discardableResult
    public mutating func setHeaderTable(bytes: [UInt8]) -> Bool {
        guard let view = AMQPWireFormat.decodeTable(bytes) else { return false }
        setReceivedHeaders(view, bytes: bytes)
        return true
    }

    /// The decoded table and its bytes as they arrived, nothing written yet.
    mutating func setReceivedHeaders(_ view: AMQPTable, bytes: [UInt8]) {
        change { fields in
            fields.headers = view
            fields.receivedHeaders = ReceivedHeaderTable(bytes: bytes)
        }
    }

    /// What `EncodingArena` sends for the headers: the received bytes and the keys written since.
    var receivedHeadersForEncoding: ReceivedHeaderTable? { storage.fields.receivedHeaders }
    /// 1 = transient, 2 = persistent.
    public var deliveryMode: UInt8? {
        get { storage.fields.deliveryMode }
        set { change { $0.deliveryMode = newValue } }
    }
    public var priority: UInt8? {
        get { storage.fields.priority }
        set { change { $0.priority = newValue } }
    }
    public var correlationID: String? {
        get { text(.correlationID) }
        set { setText(.correlationID, newValue) }
    }
    public var replyTo: String? {
        get { text(.replyTo) }
        set { setText(.replyTo, newValue) }
    }
    /// Per-message TTL in milliseconds, as the decimal string AMQP uses.
    public var expiration: String? {
        get { text(.expiration) }
        set { setText(.expiration, newValue) }
    }
    /// As text (U+FFFD for bytes that are not UTF-8; may hold control characters: log it with
    /// `AMQPShortString.logSafe`).
    public var messageID: String? {
        get { text(.messageID) }
        set { setText(.messageID, newValue) }
    }
    public var timestamp: Date? {
        get { storage.fields.timestamp }
        set { change { $0.timestamp = newValue } }
    }
    public var type: String? {
        get { text(.type) }
        set { setText(.type, newValue) }
    }
    public var userID: String? {
        get { text(.userID) }
        set { setText(.userID, newValue) }
    }
    public var appID: String? {
        get { text(.appID) }
        set { setText(.appID, newValue) }
    }

    public init(
        contentType: String? = nil, contentEncoding: String? = nil, headers: AMQPTable? = nil,
        deliveryMode: UInt8? = nil, priority: UInt8? = nil, correlationID: String? = nil,
        replyTo: String? = nil, expiration: String? = nil, messageID: String? = nil,
        timestamp: Date? = nil, type: String? = nil, userID: String? = nil, appID: String? = nil
    ) {
        let short = { (text: String?) in text.map { AMQPShortString($0) } }
        storage = SharedFields(
            Fields(
                contentType: short(contentType), contentEncoding: short(contentEncoding), headers: headers,
                deliveryMode: deliveryMode, priority: priority, correlationID: short(correlationID), replyTo: short(replyTo),
                expiration: short(expiration), messageID: short(messageID), timestamp: timestamp, type: short(type),
                userID: short(userID), appID: short(appID)))
    }

    public static func == (lhs: AMQPProperties, rhs: AMQPProperties) -> Bool {
        SharedFields.equal(lhs.storage, rhs.storage)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(storage.fields)
    }

    /// Persistent JSON, the properties of every message the worker publishes.
    public static let persistentJSON = AMQPProperties(contentType: "application/json", deliveryMode: 2)

    /// The header that keeps a republished message's original `user_id` (contract §4).
    public static let originalUserIDHeader = "x-apns-user-id"

    /// These properties for a copy the worker publishes of a message it received (a retry, a
    /// dead letter, a held or requeued job), as contract §4 says: byte for byte, except that
    /// `user_id` is dropped (the broker closes the publishing channel with 406 when it does not
    /// name the worker's own user), its value kept in header `x-apns-user-id`, and `expiration`
    /// is dropped (as RabbitMQ does when it dead-letters: a dead job must not vanish from `.dead`).
    /// `x-apns-user-id` says only what the worker moved there: a message without `user_id` loses
    /// a publisher's own, one with it has every entry of it replaced by ours.
    public func republished() -> AMQPProperties {
        let forged = storage.fields.userID == nil && storage.fields.headers?[Self.originalUserIDHeader] != nil
        guard storage.fields.userID != nil || storage.fields.expiration != nil || forged else { return self }
        var copy = self
        copy.change { fields in
            if let userID = fields.userID {
                var headers = fields.headers ?? [:]
                headers[Self.originalUserIDHeader] = userID.utf8Text.map(AMQPFieldValue.string) ?? .bytes(userID.bytes)
                fields.headers = headers
                fields.userID = nil
            } else if forged {
                fields.headers?[Self.originalUserIDHeader] = nil
                if fields.headers?.isEmpty == true { fields.headers = nil }
            }
            // Every received entry of the key goes (`setHeaders(_:writing:)`): the copy carries
            // one, ours, or none.
            fields.receivedHeaders?.written.insert(Self.originalUserIDHeader)
            fields.expiration = nil
        }
        return copy
    }
}

/// A message the worker wants published.
public struct AMQPOutboundMessage: Sendable, Hashable {
    public var exchange: String
    public var routingKey: String
    public var body: [UInt8]
    public var properties: AMQPProperties
    /// With `mandatory`, an unroutable message comes back (`basic.return`) and the publish fails.
    public var mandatory: Bool

    public init(exchange: String, routingKey: String, body: [UInt8], properties: AMQPProperties, mandatory: Bool = true) {
        self.exchange = exchange
        self.routingKey = routingKey
        self.body = body
        self.properties = properties
        self.mandatory = mandatory
    }
}

/// The copy to publish of a message whose body is over a consumer's `maxBodySize`, from its
/// properties and the body size its header announced: exchange, routing key and properties (the
/// body is the one arriving, passed on frame by frame; `body` here is ignored).
public typealias AMQPOversizedDeadLetter = @Sendable (_ properties: AMQPProperties, _ bodySize: UInt64) -> AMQPOutboundMessage

/// A message as delivered to a consumer.
public struct AMQPDeliveredMessage: Sendable, Hashable {
    private struct Fields: Sendable, Hashable {
        var exchange: String
        var routingKey: String
        var redelivered: Bool
        var body: [UInt8]
        var properties: AMQPProperties
        var oversizedBodySize: UInt64?
        var oversizedPropertiesSize: Int?
        var headersNestedTooDeep = false
        var oversizedBodyDeadLettered = false
    }

    /// Shared between copies, as `AMQPProperties`' are: a delivery is copied several times on its
    /// way through a pipeline (buffer, job, context, settle), and each copy of six fields retained
    /// each of them (`perf probe` on `swift_retain`: 20 a job for this value alone).
    private var storage: SharedFields<Fields>

    private mutating func change(_ body: (inout Fields) -> Void) { SharedFields.change(&storage, body) }

    public var exchange: String {
        get { storage.fields.exchange }
        set { change { $0.exchange = newValue } }
    }
    public var routingKey: String {
        get { storage.fields.routingKey }
        set { change { $0.routingKey = newValue } }
    }
    public var redelivered: Bool {
        get { storage.fields.redelivered }
        set { change { $0.redelivered = newValue } }
    }
    public var body: [UInt8] {
        get { storage.fields.body }
        set { change { $0.body = newValue } }
    }
    public var properties: AMQPProperties {
        get { storage.fields.properties }
        set { change { $0.properties = newValue } }
    }
    /// Set when the body was larger than the consumer's `maxBodySize`: its bytes were read and
    /// dropped, `body` is empty, and this is the size its content header announced. The
    /// message is still the consumer's to settle.
    public var oversizedBodySize: UInt64? {
        get { storage.fields.oversizedBodySize }
        set { change { $0.oversizedBodySize = newValue } }
    }

    /// Set when the properties (headers included) took more than
    /// `AMQPProperties.maximumEncodedSize` bytes on the wire: the message is malformed (contract
    /// §4), and `properties` holds all of them but the header table, which was not kept.
    public var oversizedPropertiesSize: Int? {
        get { storage.fields.oversizedPropertiesSize }
        set { change { $0.oversizedPropertiesSize = newValue } }
    }

    /// Set when the header table nested deeper than `AMQPProperties.maximumHeaderDepth`: the
    /// message is malformed, and `properties` holds all of them but the header table, which was
    /// not kept.
    public var headersNestedTooDeep: Bool {
        get { storage.fields.headersNestedTooDeep }
        set { change { $0.headersNestedTooDeep = newValue } }
    }

    /// Set with `oversizedBodySize` when the consumer asked for such messages to be copied to a
    /// dead queue as they arrive (`oversizedDeadLetter`) and the broker confirmed that copy:
    /// all that is left to do is ack it.
    public var oversizedBodyDeadLettered: Bool {
        get { storage.fields.oversizedBodyDeadLettered }
        set { change { $0.oversizedBodyDeadLettered = newValue } }
    }

    public init(
        exchange: String, routingKey: String, redelivered: Bool, body: [UInt8], properties: AMQPProperties,
        oversizedBodySize: UInt64? = nil, oversizedPropertiesSize: Int? = nil
    ) {
        storage = SharedFields(
            Fields(
                exchange: exchange, routingKey: routingKey, redelivered: redelivered, body: body, properties: properties,
                oversizedBodySize: oversizedBodySize, oversizedPropertiesSize: oversizedPropertiesSize))
    }

    public static func == (lhs: AMQPDeliveredMessage, rhs: AMQPDeliveredMessage) -> Bool {
        SharedFields.equal(lhs.storage, rhs.storage)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(storage.fields)
    }
}

extension Duration {
    /// Whole milliseconds, rounded down: AMQP's TTLs and our poll timeouts.
    var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}

/// The fields of a value, shared between the value's copies: a copy retains this one object, not
/// each field. Changed only while uniquely referenced (`change`), which is what makes sharing it
/// safe; `AMQPProperties` and `AMQPDeliveredMessage` keep their fields here.
final class SharedFields<Fields: Sendable & Hashable>: @unchecked Sendable {
    var fields: Fields

    init(_ fields: Fields) { self.fields = fields }

    /// Changes the fields, first copying them when another value shares them.
    static func change(_ storage: inout SharedFields, _ body: (inout Fields) -> Void) {
        if !isKnownUniquelyReferenced(&storage) { storage = SharedFields(storage.fields) }
        body(&storage.fields)
    }

    static func equal(_ lhs: SharedFields, _ rhs: SharedFields) -> Bool {
        lhs === rhs || lhs.fields == rhs.fields
    }
}
