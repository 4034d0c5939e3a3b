/// The transports' reconnect delays: doubling after failures, capped, reset by a useful connection.
import APNSModel
import APNSTransport
import Testing

@Suite struct ReconnectBackoffTests {
    @Test func failuresDoubleUpToTheCapAndAUsefulConnectionResets() {
        var backoff = ReconnectBackoff(initial: .milliseconds(100), maximum: .seconds(1))
        let failures = (0..<6).map { _ in backoff.delay(afterUsefulConnection: false) }
        #expect(failures == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .seconds(1), .seconds(1)])
        #expect(backoff.delay(afterUsefulConnection: true) == .milliseconds(100))
        #expect(backoff.delay(afterUsefulConnection: false) == .milliseconds(100), "the doubling starts again")
        #expect(backoff.delay(afterUsefulConnection: false) == .milliseconds(200))
    }
}
