import APNSModel
import Synchronization
import Testing

@testable import APNSWorker

/// The in-process counts and per-minute rates behind the admin page and `/api/status`, on a
/// clock the test moves.
@Suite struct WorkerStatisticsTests {
    final class TestClock: Sendable {
        let instant = Mutex(ContinuousClock.now)
        func advance(_ duration: Duration) { instant.withLock { $0 += duration } }
        var now: ContinuousClock.Instant { instant.withLock { $0 } }
    }

    @Test func countsSinceStartAndRatesOverTheLastMinute() {
        let clock = TestClock()
        let statistics = WorkerStatistics(now: { clock.now })
        statistics.bundle("a").jobEnded(.delivered, after: .milliseconds(5))
        statistics.bundle("a").jobEnded(.delivered, after: .milliseconds(5))
        statistics.bundle("a").jobEnded(.dead, after: .milliseconds(5))
        clock.advance(.seconds(30))
        statistics.bundle("a").jobEnded(.delivered, after: .milliseconds(5))
        statistics.bundle("b").jobEnded(.retry, after: .milliseconds(5))

        let a = statistics.activity(bundle: "a")
        #expect(a.jobs == ["delivered": 3, "invalid_token": 0, "retry": 0, "dead": 1, "held": 0, "gated": 0])
        #expect(a.perMinute["delivered"] == 3)
        #expect(a.perMinute["dead"] == 1)

        clock.advance(.seconds(31))  // the first three left the window, the fourth did not
        let later = statistics.activity(bundle: "a")
        #expect(later.jobs["delivered"] == 3)
        #expect(later.perMinute["delivered"] == 1)
        #expect(later.perMinute["dead"] == 0)
        #expect(Set(statistics.snapshot().keys) == ["a", "b"])
        #expect(statistics.snapshot()["b"]?.jobs["retry"] == 1)
    }

    @Test func inFlightIsTheConsumersOwnCount() {
        let statistics = WorkerStatistics()
        let consumerCount = Mutex(0)
        statistics.bundle("a").countInFlight { consumerCount.withLock { $0 } }
        statistics.bundle("a").jobStarted()
        consumerCount.withLock { $0 = 1 }
        #expect(statistics.activity(bundle: "a").inFlight == 1)
        #expect(statistics.snapshot()["a"]?.inFlight == 1)
        consumerCount.withLock { $0 = 0 }
        #expect(statistics.activity(bundle: "a").inFlight == 0)
        #expect(statistics.activity(bundle: "unseen") == statistics.activity(bundle: "other"))
        #expect(statistics.activity(bundle: "unseen").jobs.values.allSatisfy { $0 == 0 })
    }

    @Test func aBundleWithNoJobYetIsNotInTheSnapshot() {
        let statistics = WorkerStatistics()
        let recorder = statistics.bundle("a")
        #expect(statistics.snapshot().isEmpty)
        #expect(statistics.bundle("a") === recorder)
        recorder.jobStarted()
        #expect(Set(statistics.snapshot().keys) == ["a"])
    }
}
