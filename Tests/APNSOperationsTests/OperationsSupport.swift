// Shared pieces of the broker tests of APNSOperations: a bundle topology of the test's own,
// dead and retry jobs shaped as the worker writes them, and draining a queue in order.
import AMQPClient
import APNSModel
import APNSOperations
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import TestSupport

func testLogger() -> Logger {
    var logger = Logger(label: "operations-test")
    logger.logLevel = .warning
    return logger
}

func amqpConfiguration(_ broker: BrokerCoordinates) throws -> AMQPConfiguration {
    AMQPConfiguration(urls: [try AMQPURL(string: broker.amqpURL)], connectionName: uniqueName("ops-test"))
}

/// A bundle of the test's own with its whole topology declared on the test broker.
struct TestBundle {
    let broker: BrokerCoordinates
    let bundleID: String
    let queueType: QueueType
    let retryDelays: [Duration]

    static func make(_ queueType: QueueType = .quorum, retryDelays: [Duration] = [.seconds(600), .seconds(1200)]) async throws -> TestBundle {
        let bundle = TestBundle(
            broker: try TestBroker.require(), bundleID: uniqueName("com.example.ops"), queueType: queueType, retryDelays: retryDelays)
        try await bundle.withConnection { try await $0.declare(bundle.ownPlan) }
        return bundle
    }

    var plan: TopologyPlan { TopologyPlan(bundleIDs: [bundleID], retryDelays: retryDelays, queueType: queueType) }

    /// The exchanges and this bundle's queues only: the shared queues (`apns.unrouted`…) exist
    /// already with the type of whichever test came first, and a classic bundle must not clash.
    var ownPlan: TopologyPlan {
        var plan = self.plan
        let prefix = TopologyNames.workQueue(bundleID)
        plan.queues = plan.queues.filter { $0.name.hasPrefix(prefix) }
        plan.bindings = plan.bindings.filter { $0.queue.hasPrefix(prefix) }
        return plan
    }
    var work: String { TopologyNames.workQueue(bundleID) }
    var dead: String { TopologyNames.deadQueue(bundleID) }
    func retry(_ index: Int) -> String { TopologyNames.retryQueue(bundleID, delay: retryDelays[index]) }

    /// Waits generous for a loaded CI machine: a listing that stops waiting for the next
    /// message, or returns before its messages are back, makes the next step's counts wrong.
    func inspector(bundles: [String]? = nil, handBackWait: Duration = .seconds(30), ackSettleWait: Duration = .milliseconds(500)) throws -> QueueInspector {
        QueueInspector(
            amqp: try amqpConfiguration(broker), bundleIDs: bundles ?? [bundleID], retryDelays: retryDelays, logger: testLogger(),
            deliveryWait: .seconds(10), handBackWait: handBackWait, ackSettleWait: ackSettleWait)
    }

    @discardableResult
    func withConnection<T>(isolation: isolated (any Actor)? = #isolation, _ body: (AMQPConnection) async throws -> T) async throws -> T {
        try await AMQPConnection.withConnection(configuration: try amqpConfiguration(broker), logger: testLogger(), body)
    }

    func depth(_ queue: String) async throws -> Int {
        try await withConnection { Int(try await $0.inspectQueue(queue).messageCount) }
    }

    /// Publishes `ids.count` dead jobs as the worker writes them, in order (confirmed one by one).
    func seedDead(_ ids: [String], reason: (Int) -> String = { _ in "BadDeviceToken" }, failedAt: (Int) -> Date = { _ in Date() }) async throws {
        try await withConnection { connection in
            for (index, id) in ids.enumerated() {
                try await connection.publish(deadJob(id: id, to: dead, reason: reason(index), failedAt: failedAt(index)))
            }
        }
    }

    /// Publishes retry jobs (attempt `attempt`) to retry queue `index`.
    func seedRetry(_ ids: [String], queue index: Int = 0, attempt: Int = 2) async throws {
        try await withConnection { connection in
            for id in ids {
                var properties = AMQPProperties.persistentJSON
                properties.messageID = id
                properties.timestamp = Date()
                properties.headers = [JobHeaders.attempt: .int32(Int32(attempt))]
                try await connection.publishAgainAfterNacks(AMQPOutboundMessage(exchange: "", routingKey: retry(index), body: jobBody(id), properties: properties))
            }
        }
    }

    /// Takes and acks every message of `queue`; their messages in queue order.
    func drain(_ queue: String) async throws -> [AMQPDeliveredMessage] {
        try await withConnection { connection in
            var messages: [AMQPDeliveredMessage] = []
            while let delivery = try await connection.get(queue: queue) {
                messages.append(delivery.message)
                await connection.ack(delivery)
            }
            // Let the last acks reach the broker before the channel closes (contract §4).
            try await Task.sleep(for: .milliseconds(300))
            return messages
        }
    }
}

let testToken = "0011223344556677889900aabbccddeeff0011223344556677889900aabbccdd"

func jobBody(_ id: String) -> [UInt8] {
    Array(#"{"id":"\#(id)","token":"\#(testToken)","payload":{"aps":{"alert":"test"}}}"#.utf8)
}

func deadJob(id: String, to queue: String, reason: String, failedAt: Date) -> AMQPOutboundMessage {
    var properties = AMQPProperties.persistentJSON
    properties.messageID = id
    properties.timestamp = failedAt
    properties.headers = [
        JobHeaders.reason: .string(reason), JobHeaders.status: .int32(400), JobHeaders.attempts: .int32(3),
        JobHeaders.failedAt: .string(failedAt.formatted(.iso8601)), JobHeaders.error: .string("test failure"),
        JobHeaders.attempt: .int32(2),
    ]
    return AMQPOutboundMessage(exchange: "", routingKey: queue, body: jobBody(id), properties: properties)
}

func jobIDs(_ count: Int, _ prefix: String = "job") -> [String] {
    (0..<count).map { index in
        let digits = String(index)
        return prefix + "-" + String(repeating: "0", count: max(0, 5 - digits.count)) + digits
    }
}

extension AMQPDeliveredMessage {
    var jobID: String? { properties.messageID }
}
