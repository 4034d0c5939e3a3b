// Declaring the contract's topology, checked against the broker's own view (management API).
import AMQPClient
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable))
struct TopologyTests {
    @Test func planShapeMatchesTheBroker() async throws {
        let broker = try TestBroker.require()
        let bundle = uniqueName("com.example.topo")
        let plan = TopologyPlan(bundleIDs: [bundle], retryDelays: [.seconds(10), .seconds(60), .seconds(10)], queueType: .quorum)
        try await withConnection(configuration(broker)) { connection in
        try await connection.declare(plan)

        let jobs = try await broker.object("/exchanges/%2f/apns.jobs")
        #expect(jobs["type"] as? String == "direct")
        #expect(jobs["durable"] as? Bool == true)
        #expect((jobs["arguments"] as? [String: Any])?["alternate-exchange"] as? String == "apns.unrouted")
        await #expect(try broker.object("/exchanges/%2f/apns.unrouted")["type"] as? String == "fanout")
        await #expect(try broker.object("/exchanges/%2f/apns.feedback")["type"] as? String == "topic")

        let work = try await broker.object("/queues/%2f/apns.\(bundle)")
        #expect(work["type"] as? String == "quorum")
        #expect(work["durable"] as? Bool == true)

        let retry = try await broker.object("/queues/%2f/apns.\(bundle).retry.10s")
        let arguments = try #require(retry["arguments"] as? [String: Any])
        #expect(arguments["x-queue-type"] as? String == "quorum")
        #expect((arguments["x-message-ttl"] as? NSNumber)?.int64Value == 10_000)
        #expect(arguments["x-dead-letter-exchange"] as? String == "")
        #expect(arguments["x-dead-letter-routing-key"] as? String == "apns.\(bundle)")
        #expect(arguments["x-dead-letter-strategy"] as? String == "at-least-once")
        #expect(arguments["x-overflow"] as? String == "reject-publish")
        await #expect(((try broker.object("/queues/%2f/apns.\(bundle).retry.1m"))["arguments"] as? [String: Any])?["x-message-ttl"] as? Int == 60_000)
        await #expect(try broker.object("/queues/%2f/apns.\(bundle).dead")["type"] as? String == "quorum")
        // (The shared unrouted queues may predate the limit on a test broker: see the next test.)
        for queue in plan.queues where queue.name.contains(bundle) {
            let declared = try await broker.object("/queues/%2f/\(queue.name)")["arguments"] as? [String: Any]
            #expect((declared?["x-delivery-limit"] as? NSNumber)?.int64Value == 2_147_483_647, "\(queue.name)")
        }

        let bindings = try await broker.array("/queues/%2f/apns.\(bundle)/bindings")
        #expect(bindings.contains { $0["source"] as? String == "apns.jobs" && $0["routing_key"] as? String == bundle })
        let unroutedBindings = try await broker.array("/queues/%2f/apns.unrouted/bindings")
        #expect(unroutedBindings.contains { $0["source"] as? String == "apns.unrouted" })

        // Declaring the same plan again is a no-op, and the queue counts are readable.
        try await connection.declare(plan)
        let info = try await connection.inspectQueue("apns.\(bundle)")
        #expect(info.messageCount == 0 && info.consumerCount == 0)

        for queue in plan.queues where queue.name.contains(bundle) { try await connection.deleteQueue(queue.name) }
        }
    }

    @Test func conflictingDeclareNamesTheQueueAndArgument() async throws {
        let broker = try TestBroker.require()
        let name = uniqueName("conflict")
        try await withConnection(configuration(broker)) { connection in
        try await connection.declareQueue(QueueDeclaration(name: name, arguments: ["x-message-ttl": .int(1000)]))
        do {
            try await connection.declareQueue(QueueDeclaration(name: name, arguments: ["x-message-ttl": .int(2000)]))
            Issue.record("a conflicting declare must fail")
        } catch let error as AMQPError {
            #expect(error.code == .declarationConflict)
            #expect(error.queue == name)
            #expect(error.argument == "x-message-ttl")
            #expect(error.replyCode == 406)
            #expect(error.message.contains(name) && error.message.contains("x-message-ttl"))
        }
        // The control channel was reopened: the connection keeps working.
        #expect(try await connection.inspectQueue(name).messageCount == 0)
        try await connection.deleteQueue(name)
        }
    }

    /// Quorum queues declared by a version before x-delivery-limit still start: the
    /// limit is lenient, so the existing queue is taken as it is, with a warning. Any other
    /// argument that differs still stops the declaration.
    @Test func aQueueDeclaredBeforeTheDeliveryLimitStillStarts() async throws {
        let broker = try TestBroker.require()
        let bundle = uniqueName("com.example.upgrade")
        let plan = TopologyPlan(bundleIDs: [bundle], retryDelays: [.seconds(10)], queueType: .quorum)
        try await withConnection(configuration(broker)) { connection in
            var before = plan
            // This bundle's queues as an older version declared them (the shared unrouted queues
            // are left as they are: other tests declare them too).
            for index in before.queues.indices where before.queues[index].name.contains(bundle) {
                before.queues[index].arguments["x-delivery-limit"] = nil
                if !before.queues[index].name.contains(".retry.") {
                    // Nor the dead-lettering of oversized messages.
                    for argument in ["x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-overflow"] {
                        before.queues[index].arguments[argument] = nil
                    }
                }
                before.queues[index].lenientArguments = []
            }
            try await connection.declare(before)
            try await connection.declare(plan)
            let work = try await broker.object("/queues/%2f/apns.\(bundle)")["arguments"] as? [String: Any]
            #expect(work?["x-delivery-limit"] == nil, "taken as it was")
            #expect(work?["x-dead-letter-exchange"] == nil, "taken as it was")
            #expect(try await connection.inspectQueue("apns.\(bundle)").messageCount == 0, "the connection keeps working")

            var strict = plan.queues.first { $0.name == "apns.\(bundle)" }!
            strict.arguments["x-max-length"] = .int(5)
            strict.lenientArguments = ["x-delivery-limit"]
            await #expect(throws: AMQPError.self) { try await connection.declareQueue(strict) }
            for queue in plan.queues where queue.name.contains(bundle) { try await connection.deleteQueue(queue.name) }
        }
    }

    /// The limit declared means "never" on the broker CI runs (3.10) as on RabbitMQ 4: a message
    /// handed back more than 20 times (a listing, a registry hold) stays.
    @Test func aQuorumQueueOfOursKeepsAMessageHandedBackMoreThan20Times() async throws {
        let broker = try TestBroker.require()
        let bundle = uniqueName("com.example.limit")
        let plan = TopologyPlan(bundleIDs: [bundle], retryDelays: [.seconds(10)], queueType: .quorum)
        let dead = "apns.\(bundle).dead"
        try await withConnection(configuration(broker)) { connection in
            try await connection.declare(plan)
            try await connection.publish(message("kept", to: dead))
            for round in 0..<25 {
                let delivery = try #require(try await connection.get(queue: dead), "round \(round)")
                _ = await connection.nack(delivery, requeue: true)
            }
            let last = try #require(try await connection.get(queue: dead))
            #expect(last.message.body == Array("kept".utf8))
            #expect(JobEnvelope(last.message).deliveryCount == 25)
            _ = connection.ackNow(last)
            for queue in plan.queues where queue.name.contains(bundle) { try await connection.deleteQueue(queue.name) }
        }
    }

    @Test func missingQueueIsA404AndPurgeCounts() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
        do {
            _ = try await connection.inspectQueue(uniqueName("missing"))
            Issue.record("expected NOT_FOUND")
        } catch let error as AMQPError {
            #expect(error.code == .channelClosed && error.replyCode == 404)
        }
        let name = uniqueName("purge")
        try await connection.declareQueue(classicQueue(name))
        for i in 0..<3 { try await connection.publish(message("m\(i)", to: name)) }
        #expect(try await connection.purgeQueue(name) == 3)
        #expect(try await connection.deleteQueue(name) == 0)
        }
    }
}
