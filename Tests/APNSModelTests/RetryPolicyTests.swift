import APNSModel
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
}
