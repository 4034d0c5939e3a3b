@testable import APNSWorker
import Foundation
import Synchronization
import Testing

/// The pipeline's pause switch and latency stamp, without a broker: a pause wakes whoever waits
/// for it exactly once, a resume wakes nobody, and the newest publish time wins.
struct BundleFleetStateTests {
    @Test func pausingRunsTheWatchersOnce() {
        let state = BundleFleetState()
        let calls = Mutex(0)
        let watcher = state.whenPaused { calls.withLock { $0 += 1 } }
        #expect(!state.isPaused)
        #expect(state.setPaused(true))
        #expect(!state.setPaused(true), "no change, no second call")
        #expect(calls.withLock { $0 } == 1)
        #expect(state.isPaused)
        #expect(state.setPaused(false))
        #expect(calls.withLock { $0 } == 1, "resuming wakes nobody")
        state.removeWatcher(watcher)
        #expect(state.setPaused(true))
        #expect(calls.withLock { $0 } == 1, "a removed watcher is not called")
    }

    @Test func theNewestPublishTimeIsKept() {
        let state = BundleFleetState()
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(state.lastTakenPublishedAt == nil)
        state.taken(publishedAt: nil)
        #expect(state.lastTakenPublishedAt == nil)
        state.taken(publishedAt: t0)
        state.taken(publishedAt: t0.addingTimeInterval(-600))  // an old job back from a retry queue
        #expect(state.lastTakenPublishedAt == t0)
        state.taken(publishedAt: t0.addingTimeInterval(5))
        #expect(state.lastTakenPublishedAt == t0.addingTimeInterval(5))
    }
}
