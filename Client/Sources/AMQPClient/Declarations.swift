/// What `AMQPConnection.declare` takes: exchanges, queues and bindings as plain values. The
/// client knows nothing of what they are for; the APNs topology is built from these above it.

/// A value in an AMQP argument table, reduced to what declarations need.
public enum TopologyArgument: Sendable, Hashable {
    case string(String)
    case int(Int64)
}

public struct ExchangeDeclaration: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable { case direct, fanout, topic }
    public var name: String
    public var kind: Kind
    public var arguments: [String: TopologyArgument]
    /// False for a transient exchange, gone after a broker restart.
    public var durable: Bool
    public init(name: String, kind: Kind, arguments: [String: TopologyArgument] = [:], durable: Bool = true) {
        self.name = name
        self.kind = kind
        self.arguments = arguments
        self.durable = durable
    }
}

public struct QueueDeclaration: Sendable, Hashable {
    public var name: String
    public var arguments: [String: TopologyArgument]
    /// Exclusive to the declaring connection and deleted with it (so not durable either).
    public var exclusive: Bool
    /// Arguments a queue declared earlier (by an older version) may lack or hold with another
    /// value. When the broker refuses the declaration over one of these (406, inequivalent
    /// argument), the queue is taken as it is (a passive declare) and a warning names the queue
    /// and the argument, instead of failing: RabbitMQ cannot change a queue's arguments, and a
    /// policy can set them on an existing queue.
    public var lenientArguments: Set<String>
    public init(name: String, arguments: [String: TopologyArgument] = [:], exclusive: Bool = false, lenientArguments: Set<String> = []) {
        self.name = name
        self.arguments = arguments
        self.exclusive = exclusive
        self.lenientArguments = lenientArguments
    }
}

public struct BindingDeclaration: Sendable, Hashable {
    public var queue: String
    public var exchange: String
    public var routingKey: String
    public init(queue: String, exchange: String, routingKey: String) {
        self.queue = queue
        self.exchange = exchange
        self.routingKey = routingKey
    }
}

/// Everything to declare, in an order that works on an empty broker: exchanges, queues, bindings.
/// Durable unless a declaration says otherwise; declaring it again with the same arguments is a
/// no-op on the broker.
public struct TopologyPlan: Sendable, Hashable {
    public var exchanges: [ExchangeDeclaration]
    public var queues: [QueueDeclaration]
    public var bindings: [BindingDeclaration]

    public init(exchanges: [ExchangeDeclaration] = [], queues: [QueueDeclaration] = [], bindings: [BindingDeclaration] = []) {
        self.exchanges = exchanges
        self.queues = queues
        self.bindings = bindings
    }
}
