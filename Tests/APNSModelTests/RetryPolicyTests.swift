import APNSModel
import Testing

@Suite struct RetryPolicyTests {
    @Test func followsTheDelaysThenGivesUp() {
        let policy = RetryPolicy.standard
        #expect(policy.delay(afterAttempt: 1) == .seconds(10))
        #expect(policy.delay(afterAttempt: 2) == .seconds(60))
        #expect(policy.delay(afterAttempt: 3) == .seconds(300))
        #expect(policy.delay(afterAttempt: 4) == .seconds(900))
        #expect(policy.delay(afterAttempt: 5) == .seconds(900))
        #expect(policy.delay(afterAttempt: 6) == nil)
        #expect(policy.delay(afterAttempt: 60) == nil)
    }

    @Test func lastDelayRepeatsWhenAttemptsOutnumberDelays() {
        let policy = RetryPolicy(delays: [.milliseconds(100), .seconds(1)], maxAttempts: 5)
        #expect(policy.delay(afterAttempt: 1) == .milliseconds(100))
        #expect(policy.delay(afterAttempt: 2) == .seconds(1))
        #expect(policy.delay(afterAttempt: 4) == .seconds(1))
        #expect(policy.delay(afterAttempt: 5) == nil)
    }

    @Test func oneAttemptMeansNoRetry() {
        #expect(RetryPolicy(delays: [.seconds(1)], maxAttempts: 1).delay(afterAttempt: 1) == nil)
    }
}
