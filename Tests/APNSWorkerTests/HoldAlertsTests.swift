import Testing

@testable import APNSWorker

/// Contract §4: one loud line per hold, not one per job or per flap (`HoldAlerts`).
@Suite struct HoldAlertsTests {
    typealias Alerts = HoldAlerts<ContinuousClock.Instant>
    /// Mutating calls cannot sit in `#expect`: the pipeline's locked wrapper of `HoldAlerts`.
    let t0 = ContinuousClock.now

    @Test func theSameFaultMetAgainSoonAfterAHoldEndedIsQuiet() {
        let alerts = HoldAlertLog()
        #expect(alerts.held(reason: "TopicDisallowed", now: t0))
        #expect(alerts.resumed(now: t0.advanced(by: .seconds(5))))
        // A refused topic met again at its next job, a hundred times: no more loud lines.
        var now = t0.advanced(by: .seconds(5))
        for _ in 0..<100 {
            now = now.advanced(by: .seconds(1))
            #expect(!alerts.held(reason: "TopicDisallowed", now: now))
            now = now.advanced(by: .seconds(5))
            #expect(!alerts.resumed(now: now))
        }
    }

    @Test func anotherReasonOrTheSameAfterAQuietSpellIsLoudAgain() {
        let alerts = HoldAlertLog()
        #expect(alerts.held(reason: "TopicDisallowed", now: t0))
        #expect(alerts.resumed(now: t0.advanced(by: .seconds(1))))
        #expect(alerts.held(reason: "InvalidProviderToken", now: t0.advanced(by: .seconds(2))), "a new fault")
        #expect(alerts.resumed(now: t0.advanced(by: .seconds(3))))
        let later = t0.advanced(by: .seconds(3)).advanced(by: Alerts.quiet).advanced(by: .seconds(1))
        #expect(alerts.held(reason: "InvalidProviderToken", now: later), "the same fault after a quiet spell")
        #expect(alerts.resumed(now: later.advanced(by: .seconds(1))))
    }

    @Test func aHoldThatLastsIsOneLoudLineWhateverItsLength() {
        let alerts = HoldAlertLog()
        #expect(alerts.held(reason: "BadCertificate", now: t0))
        let end = t0.advanced(by: .seconds(3600))
        #expect(alerts.resumed(now: end))
        #expect(!alerts.held(reason: "BadCertificate", now: end.advanced(by: .seconds(1))))
    }
}
