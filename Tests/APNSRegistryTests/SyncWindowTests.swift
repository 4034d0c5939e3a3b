import APNSModel
import APNSRegistryMessages
import Foundation
import Testing

@testable import APNSRegistry

/// The sync window of contract §6 as a pure decision, without a database: a device's state, a
/// background group job and the time decide send now, merge, or nothing.
@Suite("sync window decision")
struct SyncWindowTests {
    let window = SyncWindow(length: .seconds(30))
    let a = UUID(), b = UUID(), c = UUID()

    @Test func theFirstJobGoesOutAtOnceAndOpensAWindow() {
        #expect(window.decide(nil, job: a, included: true, now: 1_000) == .sendNow(SyncWindowState(windowEnd: 31_000, openedBy: a)))
        let ended = SyncWindowState(windowEnd: 31_000, openedBy: a, version: 4)
        #expect(
            window.decide(ended, job: b, included: true, now: 31_000)
                == .sendNow(SyncWindowState(windowEnd: 61_000, openedBy: b, version: 4)),
            "a window ends at its end: the job then opens the next one")
    }

    @Test func laterJobsInTheWindowMergeAndTheLatestWins() {
        let open = SyncWindowState(windowEnd: 31_000, openedBy: a, version: 1)
        let first = window.decide(open, job: b, included: true, now: 2_000)
        #expect(first == .merge(SyncWindowState(windowEnd: 31_000, openedBy: a, trailing: b, version: 1)))
        let merged = SyncWindowState(windowEnd: 31_000, openedBy: a, trailing: b, version: 2)
        #expect(window.decide(merged, job: c, included: true, now: 30_999) == .merge(SyncWindowState(windowEnd: 31_000, openedBy: a, trailing: c, version: 2)))
    }

    @Test func aRedeliveredJobDoesWhatItDidBeforeAndChangesNothing() {
        let open = SyncWindowState(windowEnd: 31_000, openedBy: a, trailing: b, version: 3)
        #expect(window.decide(open, job: a, included: true, now: 5_000) == .sendNow(nil), "it opened the window: its push goes out again, same id")
        #expect(window.decide(open, job: b, included: true, now: 5_000) == .merge(nil), "already the trailing push")
    }

    @Test func aDeviceTheJobExcludesIsLeftAlone() {
        let open = SyncWindowState(windowEnd: 31_000, openedBy: a, version: 1)
        #expect(window.decide(open, job: b, included: false, now: 2_000) == .nothing)
        #expect(window.decide(nil, job: b, included: false, now: 2_000) == .nothing)
    }

    @Test func aJobAfterAnOverdueTrailingPushReplacesIt() {
        // Due at 31 s but not sent yet (every instance was down): the new job is newer, so it
        // goes out now in place of the trailing push and opens the next window.
        let overdue = SyncWindowState(windowEnd: 31_000, openedBy: a, trailing: b, version: 2)
        #expect(window.decide(overdue, job: c, included: true, now: 90_000) == .sendNow(SyncWindowState(windowEnd: 120_000, openedBy: c, version: 2)))
    }

    @Test func theTrailingPushOpensTheNextWindow() {
        let merged = SyncWindowState(windowEnd: 31_000, openedBy: a, trailing: c, version: 5)
        let next = window.afterTrailingPush(merged, now: 31_200)
        #expect(next == SyncWindowState(windowEnd: 61_200, openedBy: c, trailing: nil, version: 5))
        // A job arriving during the next window merges into it; its redelivery, after the
        // trailing push carried it, sends again rather than waiting another window.
        #expect(window.decide(next, job: b, included: true, now: 40_000) == .merge(SyncWindowState(windowEnd: 61_200, openedBy: c, trailing: b, version: 5)))
        #expect(window.decide(next, job: c, included: true, now: 40_000) == .sendNow(nil))
    }

    @Test func aBurstGivesEachDeviceOneImmediateAndOneTrailingPushWithTheLatestJob() {
        var state: SyncWindowState? = nil
        var immediate: [UUID] = [], trailing: [UUID] = []
        let jobs = (0..<5).map { _ in UUID() }
        for (index, job) in jobs.enumerated() {
            switch window.decide(state, job: job, included: true, now: 1_000 + Int64(index) * 1_000) {
            case .sendNow(let next):
                immediate.append(job)
                if let next { state = next }
            case .merge(let next):
                if let next { state = next }
            case .nothing:
                Issue.record("an included device is never left alone")
            }
        }
        if let pending = state?.trailing { trailing.append(pending) }
        #expect(immediate == [jobs[0]])
        #expect(trailing == [jobs[4]])
    }

    @Test func lengthsInMilliseconds() {
        #expect(SyncWindow(length: .zero).isOff)
        #expect(SyncWindow(length: .milliseconds(1_500)).lengthMS == 1_500)
        #expect(SyncWindow(length: .seconds(30)).lengthMS == 30_000)
    }

    @Test func onlyBackgroundGroupJobsAreCoalesced() throws {
        func job(_ fields: String) throws -> GroupJob {
            try GroupJobParser.parse(body: Array(#"{"group":"g",\#(fields)}"#.utf8), messageID: nil).get()
        }
        #expect(try job(#""payload":{"aps":{"content-available":1}}"#).isBackground, "background by default, as section 2 says")
        #expect(try job(#""payload":{"aps":{"content-available":1}},"pushType":"background""#).isBackground)
        #expect(try !job(#""payload":{"aps":{"alert":"hi"}}"#).isBackground)
        #expect(try !job(#""payload":{"aps":{"content-available":1,"alert":"hi"}}"#).isBackground)
        #expect(try !job(#""payload":{"aps":{"content-available":1}},"pushType":"voip""#).isBackground)
        #expect(try job(#""payload":{"aps":{"alert":"x"}},"pushType":"alert""#).pushType == .alert)
    }
}
