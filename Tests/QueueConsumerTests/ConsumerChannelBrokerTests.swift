/// A queue consumer's channels against the real broker: a consumer paused and resumed, or
/// stopped and replaced by another (a reload's unit), many times over, keeps the connection's
/// channels as they were (a cancelled consumer's channel used to stay open until the connection
/// ended, one more per cycle towards the broker's `channel_max`); jobs abandoned at the shutdown
/// deadline go back to the queue at once, not when the connection ends.
import AMQPClient
import Foundation
import Logging
import ServiceClock
import Synchronization
import Testing
import TestSupport

@testable import QueueConsumer

@Suite(.serialized, .enabled(if: TestBroker.isAvailable))
struct ConsumerChannelBrokerTests {
    typealias CountingWork = ReconsumeBrokerTests.CountingWork

    /// Takes every job it is given and never answers: each stays in flight until the deadline.
    final class SilentWork: ConsumerWork, Sendable {
        let broker: AMQPConnection
        let queue: String
        let taken = Atomic<Int>(0)

        init(broker: AMQPConnection, queue: String) {
            self.broker = broker
            self.queue = queue
        }

        var prefetch: UInt16 { 10 }
        var maxBodySize: Int { 1 << 16 }
        var oversizedDeadLetter: AMQPOversizedDeadLetter? { nil }
        func publishTime(of delivery: AMQPDelivery) -> Date? { nil }
        func probe() async throws -> ConsumerProbe { .nothing }
        func start(_ delivery: AMQPDelivery, probe: Bool, on consumer: QueueConsumer<SilentWork>) {
            taken.add(1, ordering: .relaxed)
        }
    }

    static func connect(_ name: String, _ body: (AMQPConnection, BrokerCoordinates, String) async throws -> Void) async throws {
        let broker = try TestBroker.require()
        var logger = Logger(label: "consumer-channels")
        logger.logLevel = .warning
        let configuration = AMQPConfiguration(urls: [try AMQPURL(string: broker.amqpURL)], connectionName: name)
        let queue = uniqueName("consumer-channels")
        try await AMQPConnection.withConnection(configuration: configuration, logger: logger) { connection in
            try await connection.declareQueue(QueueDeclaration(name: queue, arguments: ["x-queue-type": .string("quorum")]))
            try await body(connection, broker, queue)
            try await connection.deleteQueue(queue)
        }
    }

    static func publish(_ text: String, _ queue: String, _ connection: AMQPConnection) async throws {
        try await connection.publish(AMQPOutboundMessage(exchange: "", routingKey: queue, body: Array(text.utf8), properties: .persistentJSON, mandatory: true))
    }

    /// The channel numbers the broker lists for the connection, once it lists `expected` of
    /// them (its statistics lag); what it lists last when it never does.
    static func channels(settlingAt expected: Int, _ name: String, _ broker: BrokerCoordinates) async throws -> [Int] {
        var numbers: [Int] = []
        _ = await ReconsumeBrokerTests.eventually(.seconds(60)) {
            numbers = try await ReconsumeBrokerTests.channels(of: name, broker).map { $0.number }
            return numbers.count == expected
        }
        return numbers
    }

    /// 30 pauses and resumes (an operator's, or a hold and its end: both cancel the consumer and
    /// start one again), a job worked after each: the consumer comes back on its own channel.
    /// Without the fix the connection listed 34 channels at the end (one per resume), here 4:
    /// control, publish, get and the consumer's.
    @Test func pausesAndResumesKeepTheConsumersChannel() async throws {
        let name = uniqueName("pause-channels")
        try await Self.connect(name) { connection, broker, queue in
            let work = CountingWork(broker: connection, queue: queue)
            let shell = QueueConsumer<CountingWork>(
                limit: 4, probeInterval: .seconds(60), shutdownDeadline: .seconds(30), clock: SystemConsumerClock(), announce: { _ in })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await shell.run(work) }
                for cycle in 0..<30 {
                    try await Self.publish("job-\(cycle)", queue, connection)
                    try await waitUntil("job \(cycle) worked") { work.seenCount == cycle + 1 }
                    #expect(shell.setPaused(true))
                    try await waitUntil("the consumer cancelled (cycle \(cycle))") { try await connection.inspectQueue(queue).consumerCount == 0 }
                    #expect(shell.setPaused(false))
                    try await waitUntil("the consumer back (cycle \(cycle))") { try await connection.inspectQueue(queue).consumerCount == 1 }
                }
                let numbers = try await Self.channels(settlingAt: 4, name, broker)
                #expect(numbers.count == 4, "channels after 30 pauses: \(numbers)")
                #expect(work.seen.withLock { $0.values.allSatisfy { $0 == 1 } }, "no job worked twice")
                shell.stop()
                try await group.waitForAll()
            }
        }
    }

    /// 30 consumers of the same connection, each stopped once its job was worked and the next
    /// started after it (a reload stops a bundle's unit and starts another): each takes the
    /// channel the one before left, so the connection keeps one consumer channel.
    @Test func aConsumerStartedAfterAStoppedOneTakesItsChannel() async throws {
        let name = uniqueName("unit-channels")
        try await Self.connect(name) { connection, broker, queue in
            for cycle in 0..<30 {
                let work = CountingWork(broker: connection, queue: queue)
                let shell = QueueConsumer<CountingWork>(
                    limit: 4, probeInterval: .seconds(60), shutdownDeadline: .seconds(30), clock: SystemConsumerClock(), announce: { _ in })
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await shell.run(work) }
                    try await Self.publish("job-\(cycle)", queue, connection)
                    try await waitUntil("job \(cycle) worked") { work.seenCount == 1 && shell.inFlight == 0 }
                    shell.stop()
                    try await group.waitForAll()
                }
            }
            let numbers = try await Self.channels(settlingAt: 4, name, broker)
            #expect(numbers.count == 4, "channels after 30 consumers one after the other: \(numbers)")
            #expect(try await connection.inspectQueue(queue).messageCount == 0)
        }
    }

    /// Jobs still out at the shutdown deadline are handed back when the consumer finishes
    /// (its channel closes): ready in the queue again while the connection lives on. They used
    /// to stay unacked on the cancelled consumer's open channel until the connection ended.
    @Test func jobsAbandonedAtTheDeadlineAreBackInTheQueueAtOnce() async throws {
        try await Self.connect(uniqueName("abandoned")) { connection, _, queue in
            let work = SilentWork(broker: connection, queue: queue)
            let shell = QueueConsumer<SilentWork>(
                limit: 10, probeInterval: .seconds(60), shutdownDeadline: .milliseconds(200), clock: SystemConsumerClock(), announce: { _ in })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await shell.run(work) }
                for n in 0..<3 { try await Self.publish("job-\(n)", queue, connection) }
                try await waitUntil("three jobs taken") { work.taken.load(ordering: .relaxed) == 3 }
                shell.stop()
                try await group.waitForAll()
            }
            try await waitUntil("the three abandoned jobs ready in the queue again") { try await connection.inspectQueue(queue).messageCount == 3 }
            // And the connection takes them again with a new consumer.
            let again = SilentWork(broker: connection, queue: queue)
            let next = QueueConsumer<SilentWork>(
                limit: 10, probeInterval: .seconds(60), shutdownDeadline: .milliseconds(200), clock: SystemConsumerClock(), announce: { _ in })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await next.run(again) }
                try await waitUntil("the three taken again") { again.taken.load(ordering: .relaxed) == 3 }
                next.stop()
                try await group.waitForAll()
            }
        }
    }
}
