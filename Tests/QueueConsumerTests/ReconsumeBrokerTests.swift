/// A consumer re-consumed again and again while it works (issue 38: the window changes the
/// prefetch, and RabbitMQ applies `basic.qos` only to consumers started after it), against the
/// real broker the test harness starts: every job is worked exactly once, none is lost, and the
/// replaced consumers' channels are closed once their jobs are settled.
import AMQPClient
import Foundation
import Logging
import Synchronization
import Testing
import TestSupport

@testable import QueueConsumer

@Suite(.enabled(if: TestBroker.isAvailable))
struct ReconsumeBrokerTests {
    /// Counts each job it is given, and settles it a little later from the settle runner, as a
    /// bundle's jobs are settled when APNs answers.
    final class CountingWork: ConsumerWork, Sendable {
        let broker: AMQPConnection
        let queue: String
        let seen = Mutex<[String: Int]>([:])
        let redelivered = Atomic<Int>(0)

        init(broker: AMQPConnection, queue: String) {
            self.broker = broker
            self.queue = queue
        }

        var prefetch: UInt16 { 4 }
        var maxBodySize: Int { 1 << 16 }
        var oversizedDeadLetter: AMQPOversizedDeadLetter? { nil }
        func publishTime(of delivery: AMQPDelivery) -> Date? { nil }
        func probe() async throws -> ConsumerProbe { .nothing }

        func start(_ delivery: AMQPDelivery, probe: Bool, on consumer: QueueConsumer<CountingWork>) {
            let text = String(decoding: delivery.message.body, as: UTF8.self)
            seen.withLock { $0[text, default: 0] += 1 }
            if delivery.message.redelivered { redelivered.add(1, ordering: .relaxed) }
            consumer.settleLater { [broker] in
                try? await Task.sleep(for: .milliseconds(Int.random(in: 0...3)))
                if consumer.answered(.healthy) == .settle { broker.ackNow(delivery) }
                consumer.settled(probe: false)
            }
        }
    }

    static func channels(of connectionName: String, _ broker: BrokerCoordinates) async throws -> Int? {
        guard let connections = try await broker.managementJSON("/connections") as? [[String: Any]] else { return nil }
        for connection in connections {
            let properties = connection["client_properties"] as? [String: Any]
            if properties?["connection_name"] as? String == connectionName { return connection["channels"] as? Int }
        }
        return nil
    }

    @Test func aConsumerReconsumedWhileItWorksLosesNothingAndWorksNothingTwice() async throws {
        let broker = try TestBroker.require()
        let name = uniqueName("reconsume")
        var configuration = AMQPConfiguration(urls: [try AMQPURL(string: broker.amqpURL)], connectionName: name)
        configuration.heartbeat = .seconds(30)
        var logger = Logger(label: "reconsume-test")
        logger.logLevel = .warning
        try await AMQPConnection.withConnection(configuration: configuration, logger: logger) { connection in
            let queue = uniqueName("reconsume")
            try await connection.declareQueue(QueueDeclaration(name: queue, arguments: ["x-queue-type": .string("quorum")]))
            let total = 3000
            for index in 0..<total {
                try await connection.publish(
                    AMQPOutboundMessage(exchange: "", routingKey: queue, body: Array("job-\(index)".utf8), properties: .persistentJSON, mandatory: true))
            }
            let work = CountingWork(broker: connection, queue: queue)
            let shell = QueueConsumer<CountingWork>(
                limit: 4, probeInterval: .seconds(60), shutdownDeadline: .seconds(30), clock: SystemConsumerClock(), announce: { _ in })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await shell.run(work) }
                // The window grows and shrinks while the jobs flow, at every 100 jobs worked: each
                // change past the hysteresis starts a consumer with the new prefetch and cancels
                // the old one while jobs of both are in flight.
                let windows = [64, 8, 256, 16, 1024, 4, 512, 32, 4096, 8]
                for step in 0..<(total / 100 - 1) {
                    try await waitUntilTrue(.seconds(60)) { work.seen.withLock { $0.count } >= step * 100 }
                    shell.resize(to: windows[step % windows.count])
                }
                // Every job worked, exactly once; the queue holds none, ready or unacked.
                try await waitUntilTrue(.seconds(60)) { try await connection.inspectQueue(queue).messageCount == 0 && shell.inFlight == 0 }
                let seen = work.seen.withLock { $0 }
                #expect(seen.count == total)
                #expect(seen.values.allSatisfy { $0 == 1 }, "worked twice: \(seen.filter { $0.value > 1 }.keys.sorted().prefix(10))")
                #expect(Set(seen.keys) == Set((0..<total).map { "job-\($0)" }))
                // One consumer left; the replaced ones' channels closed (control, publish, one
                // consumer channel remain). The management API samples every few seconds.
                try await waitUntilTrue(.seconds(60)) { try await connection.inspectQueue(queue).consumerCount == 1 }
                try await waitUntilTrue(.seconds(60)) { try await Self.channels(of: name, broker) == 3 }
                group.cancelAll()
            }
            try await connection.deleteQueue(queue)
        }
    }
}

/// Polls `condition` every 100 ms until it holds; fails the test after `limit`.
private func waitUntilTrue(_ limit: Duration, _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(100))
    }
    Issue.record("condition not met within \(limit)")
}
