import APNSSoak
import Testing

@Suite struct JobLedgerTests {
    private func ledger() -> JobLedger {
        var ledger = JobLedger()
        ledger.published("A1", expecting: .delivered)
        ledger.published("a2", expecting: .delivered, origin: "com.example.b, published 12 s into the run")
        ledger.published("f1", expecting: .feedback)
        ledger.published("d1", expecting: .deadLetter)
        return ledger
    }

    @Test func everyJobAtItsEndIsNoFailure() {
        let seen = JobLedger.Seen(delivered: ["a1", "A2"], dead: ["D1": "InvalidJob"], feedback: ["f1"])
        #expect(ledger().allSeen(seen))
        let verdict = ledger().verdict(seen, windowPerRestart: 40, restarts: 0)
        #expect(verdict.ended == 4)
        #expect(verdict.failures.isEmpty)
    }

    @Test func aJobAtNoEndIsLost() {
        let seen = JobLedger.Seen(delivered: ["a1"], dead: ["d1": "InvalidJob"], feedback: ["f1"])
        #expect(!ledger().allSeen(seen))
        let verdict = ledger().verdict(seen, windowPerRestart: 40, restarts: 1)
        #expect(verdict.lost == ["a2"])
        #expect(verdict.failures.count == 1)
        #expect(verdict.failures == ["1 of 4 jobs lost (at no end): a2 (delivered, com.example.b, published 12 s into the run)"])
    }

    @Test func aGoodJobInADeadQueueFailsWithItsReason() {
        let seen = JobLedger.Seen(delivered: ["a1"], dead: ["a2": "DeliveryLimitExceeded", "d1": "InvalidJob", "f1": "Unregistered"], feedback: ["f1"])
        let verdict = ledger().verdict(seen, windowPerRestart: 40, restarts: 1)
        #expect(verdict.goodDeadLettered.map(\.id) == ["a2", "f1"])
        #expect(verdict.goodDeadLettered.map(\.reason) == ["DeliveryLimitExceeded", "Unregistered"])
        #expect(verdict.lost.isEmpty)
        #expect(verdict.failures == ["2 good jobs dead-lettered, e.g. a2 (DeliveryLimitExceeded), f1 (Unregistered)"])
    }

    @Test func aJobMeantToDieThatWasDeliveredIsAtTheWrongEnd() {
        let seen = JobLedger.Seen(delivered: ["a1", "a2", "d1"], dead: [:], feedback: ["f1"])
        let verdict = ledger().verdict(seen, windowPerRestart: 40, restarts: 0)
        #expect(verdict.wrongEnd == ["d1"])
    }

    @Test func duplicatesAreBoundedByTheWindowPerRestartAndThePublishesRepeated() {
        var ledger = ledger()
        let seen = JobLedger.Seen(delivered: ["a1", "a1", "a1", "a2", "a2"], dead: ["d1": "InvalidJob"], feedback: ["f1"])
        #expect(ledger.verdict(seen, windowPerRestart: 3, restarts: 1).failures.isEmpty)
        let none = ledger.verdict(seen, windowPerRestart: 3, restarts: 0)
        #expect(none.duplicates == 3)
        #expect(none.failures == ["3 jobs sent twice; the contract allows at most 0 (the in-flight window per broker restart)"])
        ledger.publishedAgain("a1")
        #expect(ledger.verdict(seen, windowPerRestart: 3, restarts: 0).duplicateBound == 1)
    }

    @Test func ledgerWithNothingPublishedHasNoFailures() {
        let verdict = JobLedger().verdict(.init(delivered: [], dead: [:], feedback: []), windowPerRestart: 1, restarts: 5)
        #expect(verdict.failures.isEmpty)
        #expect(verdict.published == 0)
    }
}
