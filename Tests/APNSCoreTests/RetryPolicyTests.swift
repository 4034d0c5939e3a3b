import APNSCore
import Testing

@Suite struct RetryPolicyTests {
    @Test func followsTheDelaysThenGivesUp() {
        let policy = RetryPolicy.standard
        #expect(policy.decision(afterAttempt: 1) == .retry(delay: .seconds(10)))
        #expect(policy.decision(afterAttempt: 2) == .retry(delay: .seconds(60)))
        #expect(policy.decision(afterAttempt: 3) == .retry(delay: .seconds(300)))
        #expect(policy.decision(afterAttempt: 4) == .retry(delay: .seconds(900)))
        #expect(policy.decision(afterAttempt: 5) == .retry(delay: .seconds(900)))
        #expect(policy.decision(afterAttempt: 6) == .exhausted)
        #expect(policy.decision(afterAttempt: 60) == .exhausted)
    }

    @Test func lastDelayRepeatsWhenAttemptsOutnumberDelays() {
        let policy = RetryPolicy(delays: [.milliseconds(100), .seconds(1)], maxAttempts: 5)
        #expect(policy.decision(afterAttempt: 1) == .retry(delay: .milliseconds(100)))
        #expect(policy.decision(afterAttempt: 2) == .retry(delay: .seconds(1)))
        #expect(policy.decision(afterAttempt: 4) == .retry(delay: .seconds(1)))
        #expect(policy.decision(afterAttempt: 5) == .exhausted)
    }

    @Test func oneAttemptMeansNoRetry() {
        #expect(RetryPolicy(delays: [.seconds(1)], maxAttempts: 1).decision(afterAttempt: 1) == .exhausted)
    }

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
}
