// The registry consumer's settle decisions against the in-memory broker (TestSupport's
// `InMemoryBroker`): each route's ack, nack, dead letter and hold, without RabbitMQ.
// PostgreSQL is never mocked: the hold is caused by a real client that finds no server.
import AMQPClient
import APNSConfig
import APNSModel
import APNSRegistryMessages
import APNSTopology
import Foundation
import Logging
import QueueConsumer
import ServiceClock
import Synchronization
import Testing
import TestSupport

@testable import APNSRegistry

@Suite("the registry consumer's settle decisions without a broker")
struct RegistryConsumerSeamTests {
    static let queue = "registry.test"
    static let deadQueue = "registry.test.dead"

    static var logger: Logger {
        var logger = Logger(label: "registry-seam-tests")
        logger.logLevel = .critical
        return logger
    }

    /// A store whose PostgreSQL is down: a real client on a port nothing listens on.
    static func storeWithoutServer() throws -> RegistryStore {
        let url = try PostgresURL(parsing: "postgres://apns:apns@127.0.0.1:\(unreachablePort)/registry?sslmode=disable")
        return try RegistryStore(settings: RegistrySettings(url: url), logger: logger)
    }

    static func broker() async throws -> InMemoryBroker {
        let broker = InMemoryBroker()
        try await broker.declareQueue(QueueDeclaration(name: queue))
        try await broker.declareQueue(QueueDeclaration(name: deadQueue))
        return broker
    }

    typealias Work = RegistryConsumer<InMemoryBroker>

    /// A registry consumer's work and the generic consumer it runs on.
    struct Consumer {
        let work: Work
        let shell: QueueConsumer<Work>
        var isHeld: Bool { shell.isHeld }

        /// One message through the work's settle, as the consumer's settle runner runs it.
        func process(_ delivery: AMQPDelivery) async {
            await work.settle(delivery, probe: false, on: shell)
        }

        func run() async throws { try await shell.run(work) }
    }

    static func consumer(
        _ broker: InMemoryBroker, store: RegistryStore, sibling: QueueConsumer<Work>? = nil,
        handle: @escaping @Sendable (AMQPDelivery) async -> RegistryRoute
    ) -> Consumer {
        let shell = QueueConsumer<Work>(
            limit: 8, probeInterval: .seconds(60), shutdownDeadline: .seconds(30), clock: SystemConsumerClock(), announce: { _ in })
        let work = RegistryConsumer(
            queue: queue, deadQueue: deadQueue, prefetch: 8, maxBodySize: RegistrationMessage.maxBodyBytes, broker: broker, store: store,
            logger: logger, clock: SystemConsumerClock(), sibling: sibling, handle: handle)
        return Consumer(work: work, shell: shell)
    }

    /// Takes the next message of the test queue as the consumer would get it.
    static func take(_ broker: InMemoryBroker, body: String) async throws -> AMQPDelivery {
        broker.enqueue(queue, body: Array(body.utf8), properties: AMQPProperties(messageID: "m-1"))
        return try #require(try await broker.get(queue: queue))
    }

    @Test func aHandledMessageIsAcked() async throws {
        let broker = try await Self.broker()
        let consumer = Self.consumer(broker, store: try Self.storeWithoutServer()) { _ in .ack }
        await consumer.process(try await Self.take(broker, body: "{}"))
        #expect(broker.settled == [.init(queue: Self.queue, body: Array("{}".utf8), requeue: nil)])
        #expect(broker.published.isEmpty)
    }

    @Test func aMalformedMessageGoesToTheDeadQueueUnchangedWithTheReasonAndIsAckedAfterTheConfirm() async throws {
        let broker = try await Self.broker()
        let error = JobError(kind: .malformedJob, field: "op", message: "unknown op")
        let consumer = Self.consumer(broker, store: try Self.storeWithoutServer()) { _ in .dead(error) }
        await consumer.process(try await Self.take(broker, body: #"{"op":"nope"}"#))
        let dead = try #require(broker.published.first)
        #expect(dead.exchange == "" && dead.routingKey == Self.deadQueue)
        #expect(dead.body == Array(#"{"op":"nope"}"#.utf8))
        #expect(dead.properties.messageID == "m-1")
        let envelope = JobEnvelope(dead.properties.headers)
        #expect(envelope.reason == JobError.Kind.malformedJob.rawValue)
        #expect(envelope.error?.contains("unknown op") == true)
        #expect(broker.ready(Self.deadQueue) == [Array(#"{"op":"nope"}"#.utf8)])
        #expect(broker.settled.map(\.requeue) == [nil])
    }

    @Test func aMessageOverTheBodyLimitIsRejectedForTheBrokerToDeadLetterWithoutBeingHandled() async throws {
        let broker = try await Self.broker()
        let handled = Mutex(0)
        let consumer = Self.consumer(broker, store: try Self.storeWithoutServer()) { _ in
            handled.withLock { $0 += 1 }
            return .ack
        }
        let body = [UInt8](repeating: 0x7B, count: RegistrationMessage.maxBodyBytes + 1)
        broker.enqueue(Self.queue, body: body, properties: AMQPProperties(messageID: "m-big"))
        let deliveries = try await broker.consume(queue: Self.queue, prefetch: 1, maxBodySize: RegistrationMessage.maxBodyBytes)
        var iterator = deliveries.makeAsyncIterator()
        let delivery = try #require(try await iterator.next())
        #expect(delivery.message.body.isEmpty && delivery.message.oversizedBodySize == UInt64(body.count))
        await consumer.process(delivery)
        await deliveries.cancel()
        // Settled without requeue and nothing published by the worker: the broker's dead-letter
        // arguments carry the untouched body to the dead queue.
        #expect(broker.settled == [.init(queue: Self.queue, body: body, requeue: false)])
        #expect(broker.published.isEmpty)
        #expect(handled.withLock { $0 } == 0)
    }

    @Test func aMalformedMessageWhoseDeadLetterIsNotConfirmedGoesBackToItsQueue() async throws {
        let broker = try await Self.broker()
        let consumer = Self.consumer(broker, store: try Self.storeWithoutServer()) { _ in
            .dead(JobError(kind: .malformedJob, field: "op", message: "unknown op"))
        }
        broker.failPublishes = true
        await consumer.process(try await Self.take(broker, body: "x"))
        #expect(broker.settled.map(\.requeue) == [true])
        #expect(broker.ready(Self.queue) == [Array("x".utf8)])
        #expect(broker.ready(Self.deadQueue) == [])
    }

    @Test func anUnconfirmedFanOutIsRequeuedWithoutHoldingTheRegistry() async throws {
        let broker = try await Self.broker()
        let consumer = Self.consumer(broker, store: try Self.storeWithoutServer()) { _ in .requeue("a publish was not confirmed") }
        await consumer.process(try await Self.take(broker, body: "g"))
        #expect(broker.settled.map(\.requeue) == [true])
        #expect(!consumer.isHeld)
    }

    @Test func aRegistryFailureRequeuesHoldsAndSendsLaterMessagesBackUntouched() async throws {
        let broker = try await Self.broker()
        let handled = Mutex(0)
        let sibling = Self.consumer(broker, store: try Self.storeWithoutServer()) { _ in .ack }
        let consumer = Self.consumer(broker, store: try Self.storeWithoutServer(), sibling: sibling.shell) { _ in
            handled.withLock { $0 += 1 }
            return .requeueAndHold(TestSupportError("connection refused"))
        }
        await consumer.process(try await Self.take(broker, body: "first"))
        #expect(consumer.isHeld)
        #expect(sibling.isHeld, "the other registry consumer is held along with it")
        await consumer.process(try await Self.take(broker, body: "second"))
        #expect(handled.withLock { $0 } == 1)
        #expect(broker.settled.map(\.requeue) == [true, true])
        #expect(broker.published.isEmpty)
        #expect(Set(broker.ready(Self.queue) ?? []) == [Array("first".utf8), Array("second".utf8)])
    }

    @Test(.timeLimit(.minutes(1)))
    func withPostgreSQLDownARegistrationStaysInTheBrokerAndTheConsumerHolds() async throws {
        let broker = try await Self.broker()
        let store = try Self.storeWithoutServer()
        let consumer = Self.consumer(broker, store: store, handle: RegistrationHandler(store: store, logger: Self.logger).handle)
        let token = String(repeating: "ab", count: 32)
        let body = #"{"op":"register","bundleId":"com.example.app","token":"\#(token)","group":"account-1","at":5}"#
        broker.enqueue(Self.queue, body: Array(body.utf8))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await store.run() }
            group.addTask { try await consumer.run() }
            try await waitUntil("the consumer held", timeout: .seconds(50)) { consumer.isHeld && broker.consumerCount == 0 }
            group.cancelAll()
        }
        // Not dead-lettered, not lost: back in its queue for when PostgreSQL answers again.
        #expect(broker.ready(Self.queue) == [Array(body.utf8)])
        #expect(broker.ready(Self.deadQueue) == [])
        #expect(broker.published.isEmpty)
        #expect(broker.unackedCount == 0)
    }
}
