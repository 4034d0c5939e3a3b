/// The feedback poller end to end: the simulator's feedback service read by the real
/// `BinaryFeedbackClient`, events published to the real broker's `apns.feedback` and read back
/// from a queue of the test's own.
import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import APNSTransport
import Foundation
import Logging
import Testing
import TestSupport

@testable import APNSWorker

@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct FeedbackPollerTests {
    @Test("every tuple the feedback service serves becomes one Unregistered event on apns.feedback, polled every interval")
    func publishesServedTuples() async throws {
        let broker = try TestBroker.require()
        let bundle = uniqueName("com.example.feedback")
        let directory = NSTemporaryDirectory() + "apnsw-feedback-\(UUID().uuidString.prefix(8))"
        let credentials = try SimulatorCredentials.generate(into: directory, teamID: "TEAM123456", keyID: "KEY1234567")
        var logger = Logger(label: "feedback-poller-test")
        logger.logLevel = .warning
        let simulator = try await APNSSimulator.start(
            SimulatorConfiguration(feedbackPort: 0, tls: credentials.tlsConfiguration(), bundleIDs: [bundle]), logger: logger)
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [broker.amqpURL], connectionName: "feedback-poller-test"), logger: logger)
        try await connection.declare(TopologyPlan(bundleIDs: [bundle], retryDelays: [.seconds(1)], queueType: .quorum))
        let queue = uniqueName("feedback.poller")
        _ = try await connection.declareQueue(QueueDeclaration(name: queue))
        try await connection.bind(BindingDeclaration(queue: queue, exchange: TopologyNames.feedbackExchange, routingKey: bundle))

        let first = (0..<3).map { n in (token: String(repeating: String(format: "%02x", n + 1), count: 32), time: UInt32(1_700_000_000 + n)) }
        for tuple in first { simulator.addFeedback(token: tuple.token, timestamp: tuple.time) }
        let client = try BinaryFeedbackClient(
            configuration: .init(
                host: "127.0.0.1", port: try #require(simulator.feedbackPort), certFile: credentials.clientCertificatePath,
                keyFile: credentials.clientKeyPath, caFile: credentials.caCertificatePath),
            logger: logger)
        let poller = FeedbackPoller(bundleID: bundle, interval: .milliseconds(200), client: client, broker: connection, logger: logger)

        func events() async throws -> [[String: Any]] {
            var out: [[String: Any]] = []
            while let delivery = try await connection.get(queue: queue) {
                await connection.ack(delivery)
                #expect(delivery.message.routingKey == bundle)
                out.append(try #require(try JSONSerialization.jsonObject(with: Data(delivery.message.body)) as? [String: Any]))
            }
            return out
        }

        let running = Task { try await poller.run() }
        var received: [[String: Any]] = []
        try await waitUntil("three feedback events", timeout: .seconds(30)) {
            received += try await events()
            return received.count >= 3
        }
        // A tuple queued later is picked up by a later poll.
        let late = (token: String(repeating: "ee", count: 32), time: UInt32(1_800_000_000))
        simulator.addFeedback(token: late.token, timestamp: late.time)
        try await waitUntil("the late feedback event", timeout: .seconds(30)) {
            received += try await events()
            return received.count >= 4
        }
        running.cancel()
        _ = try? await running.value

        let expected = first + [late]
        #expect(received.count == expected.count)
        for (event, tuple) in zip(received.sorted { ($0["token"] as? String ?? "") < ($1["token"] as? String ?? "") },
            expected.sorted { $0.token < $1.token })
        {
            #expect(event["bundleId"] as? String == bundle)
            #expect(event["token"] as? String == tuple.token)
            #expect(event["reason"] as? String == "Unregistered")
            #expect((event["timestamp"] as? NSNumber)?.int64Value == Int64(tuple.time) * 1000)
            #expect(event["jobId"] is NSNull)
        }
        #expect(simulator.pendingFeedback().isEmpty)
        #expect(simulator.counters().feedbackTuplesServed == 4)

        _ = try? await connection.deleteQueue(queue)
        await connection.close()
        try await simulator.shutdown()
    }
}
