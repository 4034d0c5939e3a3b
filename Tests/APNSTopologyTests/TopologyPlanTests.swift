import AMQPClient
import APNSCore
import APNSTopology
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
}
