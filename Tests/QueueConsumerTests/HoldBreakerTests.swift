import Testing

@testable import QueueConsumer

/// The one hold breaker on its own, as `TrailingPusher` uses it (faults and successes, each
/// poll its probe) and as the consumer machine does (probes on a schedule): every pair and
/// triple of its events, checked against a plain model of what an operator must see: one alert
/// when a hold starts, one resume line when it ends, never a probe before the interval or two
/// at once.
@Suite struct HoldBreakerTests {
    typealias Breaker = HoldBreaker<ContinuousClock.Instant>

    enum Event: String, CaseIterable, Sendable {
        case fault, success, askProbe, probeInconclusive, timePasses
    }

    struct Model {
        var breaker = Breaker(probeInterval: .seconds(5))
        var now = ContinuousClock.now
        var held = false
        var probeOut = false
        /// When the last hold or probe began: no probe is due before an interval after it.
        var lastScheduled: ContinuousClock.Instant?
        var alerts = 0
        var resumes = 0
        var violations: [String] = []

        mutating func apply(_ event: Event) {
            switch event {
            case .fault:
                let alerted = breaker.fault("registry unavailable", now: now)
                if alerted != !held { violations.append("fault alerted \(alerted) while held \(held)") }
                if alerted { alerts += 1 }
                if !held || probeOut { lastScheduled = now }
                held = true
                probeOut = false
            case .success:
                let heldFor = breaker.succeeded(now: now)
                if (heldFor != nil) != held { violations.append("success ended a hold \(heldFor != nil) while held \(held)") }
                if heldFor != nil { resumes += 1 }
                held = false
                probeOut = false
            case .askProbe:
                let due = breaker.probeDue(now: now)
                switch due {
                case .flowing: if held { violations.append("held but told flowing") }
                case .probing: if !probeOut { violations.append("told a probe is out, none is") }
                case .wait(let until):
                    if !held || probeOut { violations.append("told to wait while held \(held), probe out \(probeOut)") }
                    if let last = lastScheduled, until != last.advanced(by: .seconds(5)) { violations.append("waits until the wrong time") }
                case .probe:
                    if !held || probeOut { violations.append("a probe while held \(held), probe out \(probeOut)") }
                    if let last = lastScheduled, last.duration(to: now) < .seconds(5) { violations.append("a probe before the interval") }
                    probeOut = true
                }
            case .probeInconclusive:
                let wasOut = breaker.inconclusive(now: now)
                if wasOut != probeOut { violations.append("inconclusive found a probe \(wasOut), out \(probeOut)") }
                if probeOut { lastScheduled = now }
                probeOut = false
            case .timePasses:
                now = now.advanced(by: .seconds(5))
            }
            if breaker.isHeld != held { violations.append("breaker held \(breaker.isHeld), model \(held)") }
            if breaker.isProbing != probeOut { violations.append("breaker probing \(breaker.isProbing), model \(probeOut)") }
            if alerts - resumes != (held ? 1 : 0) { violations.append("\(alerts) alerts, \(resumes) resumes, held \(held)") }
        }
    }

    @Test(arguments: Event.allCases)
    func everyPairAndTripleOfEventsTellsOneAlertPerHoldAndProbesOnlyWhenDue(first: Event) {
        for second in Event.allCases {
            for third in Event.allCases {
                var model = Model()
                for event in [first, second, third] { model.apply(event) }
                // At rest: a held breaker probes once the interval has passed.
                if model.held && !model.probeOut {
                    model.apply(.timePasses)
                    if model.breaker.probeDue(now: model.now) != .probe { model.violations.append("held, the interval passed, no probe") }
                }
                #expect(model.violations.isEmpty, "\(first), \(second), \(third): \(model.violations)")
            }
        }
    }

    @Test func thePushersWayAFaultPerFailedPollAlertsOnceAndTheFirstSuccessResumes() {
        var breaker = Breaker(probeInterval: .seconds(1))
        let t0 = ContinuousClock.now
        let alerts = [
            breaker.fault("down", now: t0), breaker.fault("down", now: t0 + .seconds(1)), breaker.fault("down", now: t0 + .seconds(2)),
        ]
        #expect(alerts == [true, false, false])
        let resumes = [breaker.succeeded(now: t0 + .seconds(3)), breaker.succeeded(now: t0 + .seconds(4))]
        #expect(resumes == [.seconds(3), nil])
        let again = breaker.fault("down again", now: t0 + .seconds(5))
        #expect(again)
    }
}
