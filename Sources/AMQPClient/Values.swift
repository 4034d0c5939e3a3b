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
}

/// An AMQP field table. Order is not significant on the wire; a dictionary keeps look-ups simple.
public typealias AMQPTable = [String: AMQPFieldValue]

/// The AMQP `basic` content properties the worker reads and writes.
///
/// A value type whose fields live in one shared, copy-on-write reference: a delivery is copied
/// several times on its way through the worker (into the job's context, into the closures that
/// settle it), and copying thirteen optional fields one by one was a measurable share of the
/// worker's reference counting.
public struct AMQPProperties: Sendable, Hashable {
    private struct Fields: Sendable, Hashable {
        var contentType: String?
        var contentEncoding: String?
        var headers: AMQPTable?
        var deliveryMode: UInt8?
        var priority: UInt8?
        var correlationID: String?
        var replyTo: String?
        var expiration: String?
        var messageID: String?
        var timestamp: Date?
        var type: String?
        var userID: String?
        var appID: String?
    }

    private var storage: SharedFields<Fields>

    private mutating func change(_ body: (inout Fields) -> Void) { SharedFields.change(&storage, body) }

    public var contentType: String? {
        get { storage.fields.contentType }
        set { change { $0.contentType = newValue } }
    }
    public var contentEncoding: String? {
        get { storage.fields.contentEncoding }
        set { change { $0.contentEncoding = newValue } }
    }
    public var headers: AMQPTable? {
        get { storage.fields.headers }
        set { change { $0.headers = newValue } }
    }
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
        get { storage.fields.correlationID }
        set { change { $0.correlationID = newValue } }
    }
    public var replyTo: String? {
        get { storage.fields.replyTo }
        set { change { $0.replyTo = newValue } }
    }
    /// Per-message TTL in milliseconds, as the decimal string AMQP uses.
    public var expiration: String? {
        get { storage.fields.expiration }
        set { change { $0.expiration = newValue } }
    }
    public var messageID: String? {
        get { storage.fields.messageID }
        set { change { $0.messageID = newValue } }
    }
    public var timestamp: Date? {
        get { storage.fields.timestamp }
        set { change { $0.timestamp = newValue } }
    }
    public var type: String? {
        get { storage.fields.type }
        set { change { $0.type = newValue } }
    }
    public var userID: String? {
        get { storage.fields.userID }
        set { change { $0.userID = newValue } }
    }
    public var appID: String? {
        get { storage.fields.appID }
        set { change { $0.appID = newValue } }
    }

    public init(
        contentType: String? = nil, contentEncoding: String? = nil, headers: AMQPTable? = nil,
        deliveryMode: UInt8? = nil, priority: UInt8? = nil, correlationID: String? = nil,
        replyTo: String? = nil, expiration: String? = nil, messageID: String? = nil,
        timestamp: Date? = nil, type: String? = nil, userID: String? = nil, appID: String? = nil
    ) {
        storage = SharedFields(
            Fields(
                contentType: contentType, contentEncoding: contentEncoding, headers: headers, deliveryMode: deliveryMode,
                priority: priority, correlationID: correlationID, replyTo: replyTo, expiration: expiration,
                messageID: messageID, timestamp: timestamp, type: type, userID: userID, appID: appID))
    }

    public static func == (lhs: AMQPProperties, rhs: AMQPProperties) -> Bool {
        SharedFields.equal(lhs.storage, rhs.storage)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(storage.fields)
    }

    /// Persistent JSON, the properties of every message the worker publishes.
    public static let persistentJSON = AMQPProperties(contentType: "application/json", deliveryMode: 2)
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

/// A message as delivered to a consumer.
public struct AMQPDeliveredMessage: Sendable, Hashable {
    private struct Fields: Sendable, Hashable {
        var exchange: String
        var routingKey: String
        var redelivered: Bool
        var body: [UInt8]
        var properties: AMQPProperties
        var oversizedBodySize: UInt64?
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

    public init(
        exchange: String, routingKey: String, redelivered: Bool, body: [UInt8], properties: AMQPProperties,
        oversizedBodySize: UInt64? = nil
    ) {
        storage = SharedFields(
            Fields(
                exchange: exchange, routingKey: routingKey, redelivered: redelivered, body: body, properties: properties,
                oversizedBodySize: oversizedBodySize))
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
