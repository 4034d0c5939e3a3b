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
public struct AMQPProperties: Sendable, Hashable {
    public var contentType: String?
    public var contentEncoding: String?
    public var headers: AMQPTable?
    /// 1 = transient, 2 = persistent.
    public var deliveryMode: UInt8?
    public var priority: UInt8?
    public var correlationID: String?
    public var replyTo: String?
    /// Per-message TTL in milliseconds, as the decimal string AMQP uses.
    public var expiration: String?
    public var messageID: String?
    public var timestamp: Date?
    public var type: String?
    public var userID: String?
    public var appID: String?

    public init(
        contentType: String? = nil, contentEncoding: String? = nil, headers: AMQPTable? = nil,
        deliveryMode: UInt8? = nil, priority: UInt8? = nil, correlationID: String? = nil,
        replyTo: String? = nil, expiration: String? = nil, messageID: String? = nil,
        timestamp: Date? = nil, type: String? = nil, userID: String? = nil, appID: String? = nil
    ) {
        self.contentType = contentType
        self.contentEncoding = contentEncoding
        self.headers = headers
        self.deliveryMode = deliveryMode
        self.priority = priority
        self.correlationID = correlationID
        self.replyTo = replyTo
        self.expiration = expiration
        self.messageID = messageID
        self.timestamp = timestamp
        self.type = type
        self.userID = userID
        self.appID = appID
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
    public var exchange: String
    public var routingKey: String
    public var redelivered: Bool
    public var body: [UInt8]
    public var properties: AMQPProperties

    public init(exchange: String, routingKey: String, redelivered: Bool, body: [UInt8], properties: AMQPProperties) {
        self.exchange = exchange
        self.routingKey = routingKey
        self.redelivered = redelivered
        self.body = body
        self.properties = properties
    }
}

extension Duration {
    /// Whole milliseconds, rounded down: AMQP's TTLs and our poll timeouts.
    var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
