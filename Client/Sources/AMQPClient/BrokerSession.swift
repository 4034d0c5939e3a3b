// Short-lived broker sessions for the operator tools (`QueueInspector`). RabbitMQ has no peek:
// a listing takes messages without settling them and ends its session, and the end is what
// hands them back to their queues. So the tools need more than a connection's calls: a
// session they open per operation and close, whose close returns its unsettled messages. The
// real session is an `AMQPConnection` of its own; the tests' is `InMemoryBroker`'s.
import Logging

/// A broker session: consume (deliveries iterable from a task of their own, so that a wait for
/// the next one can time out), settle, publish with confirms, declare and inspect.
/// `close()` ends it, and the broker hands every delivery it did not settle back to its queue.
public protocol BrokerSession: MessageConsuming, ConfirmedPublishing, TopologyDeclaring
where Consumer.AsyncIterator: Sendable {
    /// Like `consume(queue:prefetch:maxBodySize:)`, but a body larger than `limit` is delivered
    /// with its first `limit` bytes (and `oversizedBodySize`), never held whole: the listings.
    func consume(queue: String, prefetch: UInt16, cuttingBodiesAt limit: Int) async throws -> Consumer

    func close() async
}

/// Opens broker sessions; `purpose` names one in the broker's connection list.
public protocol BrokerSessionOpening: Sendable {
    associatedtype Session: BrokerSession
    func open(_ purpose: String) async throws -> Session
}

extension AMQPConnection: BrokerSession {}

/// Real sessions: one `AMQPConnection` each, named "<connection name> (<purpose>)".
public struct AMQPSessions: BrokerSessionOpening {
    public var configuration: AMQPConfiguration
    public var logger: Logger

    public init(configuration: AMQPConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    public func open(_ purpose: String) async throws -> AMQPConnection {
        var named = configuration
        named.connectionName = "\(configuration.connectionName) (\(purpose))"
        return try await AMQPConnection.connect(configuration: named, logger: logger)
    }
}
