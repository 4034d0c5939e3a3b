import AMQPClient
import APNSModel
import APNSTopology
import APNSTopologyNames
import Testing

/// The APNs topology as declaration values, without a broker (the broker's view of it is in
/// `AMQPClientTests/TopologyTests`).
@Suite struct TopologyPlanTests {
    @Test func topologyHasOneRetryQueuePerDistinctDelay() {
        let plan = TopologyPlan(bundleIDs: ["a.b"], retryDelays: RetryPolicy.standard.delays, queueType: .quorum)
        let retryQueues = plan.queues.map(\.name).filter { $0.hasPrefix("apns.a.b.retry") }
        #expect(retryQueues == ["apns.a.b.retry.10s", "apns.a.b.retry.1m", "apns.a.b.retry.5m", "apns.a.b.retry.15m"])
        let fiveMinutes = plan.queues.first { $0.name == "apns.a.b.retry.5m" }
        #expect(fiveMinutes?.arguments["x-message-ttl"] == .int(300_000))
        #expect(fiveMinutes?.arguments["x-dead-letter-routing-key"] == .string("apns.a.b"))
        #expect(fiveMinutes?.arguments["x-dead-letter-strategy"] == .string("at-least-once"))
        #expect(TopologyNames.delayLabel(.seconds(5400)) == "1h30m")
        #expect(TopologyNames.delayLabel(.milliseconds(1500)) == "1500ms")
    }

    @Test func theRegistryAddsItsExchangesQueuesAndBindings() {
        var plan = TopologyPlan(bundleIDs: ["a.b"], retryDelays: [.seconds(10)], queueType: .classic)
        let before = plan
        plan.addRegistry(queueType: .classic)
        #expect(plan.exchanges.count == before.exchanges.count + 2)
        #expect(Set(plan.queues.map(\.name)).subtracting(before.queues.map(\.name))
            == ["apns.registry", "apns.groups", "apns.registry.dead", "apns.groups.dead"])
        #expect(plan.queues.allSatisfy { $0.arguments["x-queue-type"] == .string("classic") })
    }

    /// RabbitMQ 4 drops a quorum queue's message after 20 deliveries unless told otherwise;
    /// every quorum queue of ours says "never" (2^31−1: -1 drops at the first return on 3.10),
    /// leniently, so a queue declared before still starts. Classic queues have no such limit.
    @Test(arguments: [QueueType.quorum, .classic])
    func everyQuorumQueueDeclaresItsDeliveryLimit(type: QueueType) {
        var plan = TopologyPlan(bundleIDs: ["a.b", "c.d"], retryDelays: RetryPolicy.standard.delays, queueType: type)
        plan.addRegistry(queueType: type)
        #expect(plan.queues.count == 2 + 2 * 6 + 4)
        for queue in plan.queues {
            switch type {
            case .quorum:
                #expect(queue.arguments["x-delivery-limit"] == .int(2_147_483_647), "\(queue.name)")
                #expect(queue.lenientArguments.contains("x-delivery-limit"), "\(queue.name)")
            case .classic:
                #expect(queue.arguments["x-delivery-limit"] == nil, "\(queue.name)")
                #expect(!queue.lenientArguments.contains("x-delivery-limit"))
            }
        }
    }

    /// The worker never keeps the body of a message over its size limit, so the broker
    /// dead-letters it (docs/decisions.md, "Oversized messages"): every queue the worker
    /// consumes names its dead queue, at-least-once on quorum queues, leniently (a queue of an
    /// earlier version starts as it is). No other queue dead-letters anywhere but as before.
    @Test(arguments: [QueueType.quorum, .classic])
    func everyConsumedQueueDeadLettersIntoItsDeadQueue(type: QueueType) {
        var plan = TopologyPlan(bundleIDs: ["a.b"], retryDelays: [.seconds(10)], queueType: type)
        plan.addRegistry(queueType: type)
        let expected = ["apns.a.b": "apns.a.b.dead", "apns.registry": "apns.registry.dead", "apns.groups": "apns.groups.dead"]
        let deadLettering = ["x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-overflow"]
        for queue in plan.queues {
            guard let dead = expected[queue.name] else {
                if !queue.name.contains(".retry.") {
                    #expect(queue.arguments["x-dead-letter-exchange"] == nil, "\(queue.name)")
                }
                continue
            }
            #expect(queue.arguments["x-dead-letter-exchange"] == .string(""), "\(queue.name)")
            #expect(queue.arguments["x-dead-letter-routing-key"] == .string(dead), "\(queue.name)")
            #expect(queue.arguments["x-dead-letter-strategy"] == (type == .quorum ? .string("at-least-once") : nil))
            #expect(queue.arguments["x-overflow"] == (type == .quorum ? .string("reject-publish") : nil))
            #expect(queue.lenientArguments.isSuperset(of: deadLettering), "\(queue.name)")
        }
    }

    /// The fleet of contract §5: a transient exchange, an exclusive queue per admin server, durable pause markers.
    @Test func theFleetTopology() {
        let plan = FleetTopology.plan(instanceID: "h-1-abc", messageTTL: .seconds(15))
        #expect(plan.exchanges == [ExchangeDeclaration(name: "apns.fleet", kind: .fanout, durable: false)])
        #expect(plan.queues.map(\.name) == ["apns.fleet.instance.h-1-abc"])
        #expect(plan.queues[0].exclusive)
        #expect(plan.queues[0].arguments["x-message-ttl"] == .int(15000))
        #expect(plan.bindings == [BindingDeclaration(queue: "apns.fleet.instance.h-1-abc", exchange: "apns.fleet", routingKey: "")])
        #expect(FleetTopology.pauseMarker("com.example.app").name == "apns.fleet.paused.com.example.app")
        #expect(!FleetTopology.pauseMarker("com.example.app").exclusive)
        #expect(FleetTopology.isPausable("com.omnigroup.OmniFocus2.iPad"))
        #expect(FleetTopology.isPausable("com.example.my_app-2"))
        for bad in ["", "a b", "a/b", "é.app", "<b>", String(repeating: "a", count: 201)] {
            #expect(!FleetTopology.isPausable(bad), "\(bad)")
        }
    }
}
