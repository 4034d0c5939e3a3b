/// A consumer whose window is re-sized again and again while it works (the window
/// changes the prefetch, and RabbitMQ applies `basic.qos` only to consumers started after it),
/// against the real broker the test harness starts: every job is worked exactly once, none is
/// lost, nothing stays unacked, and the replaced consumers are gone, none left on a channel of
/// its own. A failure says which jobs are missing and where each working came from. The first
/// build, which moved each new consumer to a new channel and closed the old one, failed here
/// 2 to 4 times in 15 runs beside two busy loops (jobs worked twice: acks overtaken by the close).
import AMQPClient
import Foundation
import Logging
import ServiceClock
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
        /// Where each working came from: the delivery's tag (value@channel.generation), its
        /// consumer and whether the broker marked it redelivered; printed for a job worked twice.
        let origins = Mutex<[String: [String]]>([:])
        let staleAcks = Atomic<Int>(0)

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
            let origin = "\(delivery.tag) \(delivery.consumerTag ?? "-")\(delivery.message.redelivered ? " redelivered" : "")"
            origins.withLock { $0[text, default: []].append(origin) }
            consumer.settleLater { [self] in
                try? await Task.sleep(for: .milliseconds(Int.random(in: 0...3)))
                if consumer.answered(.healthy, endsAHold: false) == .settle, self.broker.ackNow(delivery) == .stale {
                    self.staleAcks.add(1, ordering: .relaxed)
                }
                consumer.settled(probe: false)
            }
        }

        var seenCount: Int { seen.withLock { $0.count } }
    }

    /// The management API's view of the connection named `name`: per channel, its number,
    /// consumers and unacked messages (sampled every few seconds by the broker).
    static func channels(of name: String, _ broker: BrokerCoordinates) async throws -> [(number: Int, consumers: Int, unacked: Int)] {
        guard let connections = try await broker.managementJSON("/connections") as? [[String: Any]],
            let connection = connections.first(where: { ($0["client_properties"] as? [String: Any])?["connection_name"] as? String == name }),
            let server = connection["name"] as? String,
            let path = server.addingPercentEncoding(withAllowedCharacters: .alphanumerics),
            let channels = try await broker.managementJSON("/connections/\(path)/channels") as? [[String: Any]]
        else { return [] }
        return channels.compactMap { channel in
            guard let number = channel["number"] as? Int else { return nil }
            return (number, channel["consumer_count"] as? Int ?? -1, channel["messages_unacknowledged"] as? Int ?? -1)
        }.sorted { $0.number < $1.number }
    }

    static func connectionChannelCount(of name: String, _ broker: BrokerCoordinates) async throws -> Int? {
        guard let connections = try await broker.managementJSON("/connections") as? [[String: Any]] else { return nil }
        for connection in connections {
            let properties = connection["client_properties"] as? [String: Any]
            if properties?["connection_name"] as? String == name { return connection["channels"] as? Int }
        }
        return nil
    }

    /// The queue's ready and unacked counts as the management API last sampled them.
    static func queueCounts(_ queue: String, _ broker: BrokerCoordinates) async throws -> (ready: Int, unacked: Int) {
        let info = try await broker.managementJSON("/queues/%2f/\(queue)") as? [String: Any]
        return (info?["messages_ready"] as? Int ?? -1, info?["messages_unacknowledged"] as? Int ?? -1)
    }

    @Test func aConsumerReSizedManyTimesWhileItWorksLosesNothingAndWorksNothingTwice() async throws {
        let broker = try TestBroker.require()
        let name = uniqueName("reconsume")
        var configuration = AMQPConfiguration(urls: [try AMQPURL(string: broker.amqpURL)], connectionName: name)
        configuration.heartbeat = .seconds(30)
        var logger = Logger(label: "reconsume-test")
        logger.logLevel = .warning
        let queue = uniqueName("reconsume")
        let total = 3000
        let ids = (0..<total).map { "job-\($0)" }
        var failure: String?
        try await AMQPConnection.withConnection(configuration: configuration, logger: logger) { connection in
            try await connection.declareQueue(QueueDeclaration(name: queue, arguments: ["x-queue-type": .string("quorum")]))
            try await withThrowingTaskGroup(of: Void.self) { group in
                for slice in stride(from: 0, to: total, by: 100) {
                    group.addTask {
                        for id in ids[slice..<min(total, slice + 100)] {
                            try await connection.publish(
                                AMQPOutboundMessage(exchange: "", routingKey: queue, body: Array(id.utf8), properties: .persistentJSON, mandatory: true))
                        }
                    }
                }
                try await group.waitForAll()
            }
            let work = CountingWork(broker: connection, queue: queue)
            let shell = QueueConsumer<CountingWork>(
                limit: 4, probeInterval: .seconds(60), shutdownDeadline: .seconds(30), clock: SystemConsumerClock(), announce: { _ in })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await shell.run(work) }
                // The window grows and shrinks while the jobs flow, after every 30 jobs worked:
                // each change past the hysteresis changes the consumers while jobs of the ones
                // before are still in flight or buffered. No timing: each step waits for work.
                let windows = [64, 8, 256, 16, 1024, 4, 512, 32, 4096, 8, 2, 300, 40, 9]
                var step = 0
                while work.seenCount < total - 30 {
                    let reached = work.seenCount + 30
                    guard await Self.eventually(.seconds(120), { work.seenCount >= reached }) else { break }
                    shell.resize(to: windows[step % windows.count])
                    step += 1
                }
                // Every job worked exactly once; none ready, none unacked; one consumer left,
                // on one channel beside the control, publish and get channels.
                let settled = await Self.eventually(.seconds(180)) {
                    guard work.seenCount == total, shell.inFlight == 0 else { return false }
                    let counts = try await Self.queueCounts(queue, broker)
                    let info = try await connection.inspectQueue(queue)
                    let channels = try await Self.connectionChannelCount(of: name, broker)
                    return counts.ready == 0 && counts.unacked == 0 && info.messageCount == 0 && info.consumerCount == 1 && channels == 4
                }
                if !settled {
                    let seen = work.seen.withLock { $0 }
                    let missing = ids.filter { seen[$0] == nil }
                    let counts = try? await Self.queueCounts(queue, broker)
                    let channels = (try? await Self.channels(of: name, broker)) ?? []
                    failure = """
                        after \(step) re-sizes: \(seen.count) of \(total) worked, \(missing.count) missing \
                        (\(missing.prefix(20).joined(separator: ", "))); in flight \(shell.inFlight), limit \(shell.limit); \
                        queue ready \(counts?.ready ?? -1), unacked \(counts?.unacked ?? -1); \
                        channels (number, consumers, unacked): \(channels.map { "(\($0.number), \($0.consumers), \($0.unacked))" }.joined(separator: " "))
                        """
                }
                let twice = work.seen.withLock { $0.filter { $0.value > 1 }.keys.sorted() }
                let origins = work.origins.withLock { $0 }
                #expect(twice.isEmpty, "worked more than once: \(twice.prefix(8).map { "\($0): \(origins[$0] ?? [])" })")
                #expect(work.staleAcks.load(ordering: .relaxed) == 0, "acks dropped as stale: their jobs come again")
                group.cancelAll()
                // A consumer that failed (a `basic.consume` refused) fails the test here.
                try await group.waitForAll()
            }
        }
        guard let failure else {
            _ = try await AMQPConnection.withConnection(configuration: configuration, logger: logger) { try await $0.deleteQueue(queue) }
            return
        }
        // Where the missing jobs are: with the connection closed, what was unacked on its
        // channels is back in the queue, ready.
        var inQueue: [String] = []
        try await AMQPConnection.withConnection(configuration: configuration, logger: logger) { connection in
            while let delivery = try await connection.get(queue: queue) {
                inQueue.append(String(decoding: delivery.message.body, as: UTF8.self))
                connection.ackNow(delivery)
            }
            try await connection.deleteQueue(queue)
        }
        Issue.record("\(failure)\nin the queue once the connection closed (ready or unacked before): \(inQueue.count): \(inQueue.prefix(20))")
    }

    /// Polls `condition` every 100 ms until it holds (true) or `limit` of polling passes (false;
    /// `waitUntil`). A condition that throws counts as not holding yet.
    static func eventually(_ limit: Duration, _ condition: () async throws -> Bool) async -> Bool {
        (try? await waitUntil("the condition", timeout: limit) { (try? await condition()) == true }) != nil
    }
}
