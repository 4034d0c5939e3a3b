import ServiceClock
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import Testing
import TestSupport

/// The one periodic loop on a manual clock: rounds come as the clock passes the interval, and
/// the loop ends on either stop (cancellation, graceful shutdown) without another round.
@Suite struct PeriodicTests {
    static let interval = Duration.seconds(3600)

    /// A periodic loop on a manual clock, counting its rounds.
    final class Loop: Sendable {
        let clock = ManualClock()
        let rounds = Mutex(0)
        var count: Int { rounds.withLock { $0 } }

        func run(start: Periodic.Start, until stop: StopSignal? = nil) async {
            await Periodic.run(every: PeriodicTests.interval, on: clock, start: start, until: stop) { rounds.withLock { $0 += 1 } }
        }

        /// Runs the loop while `body` drives it, then cancels it and waits for it to end.
        func running(start: Periodic.Start, _ body: () async throws -> Void) async throws {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await self.run(start: start) }
                try await body()
                group.cancelAll()
                try await group.waitForAll()
            }
        }

        /// Waits until the loop sleeps on its clock after `rounds` rounds.
        func asleep(after rounds: Int) async throws {
            try await waitUntil("asleep after \(rounds) rounds") { self.clock.sleepers == 1 && self.count == rounds }
        }
    }

    @Test func roundsComeAsTheClockPassesTheInterval() async throws {
        let loop = Loop()
        try await loop.running(start: .afterInterval) {
            try await loop.asleep(after: 0)
            loop.clock.advance(by: Self.interval / 2)
            #expect(loop.count == 0)
            loop.clock.advance(by: Self.interval / 2)
            try await loop.asleep(after: 1)
            loop.clock.advance(by: Self.interval)
            try await loop.asleep(after: 2)
        }
        #expect(loop.count == 2)
    }

    @Test func startingNowRunsTheFirstRoundAtOnce() async throws {
        let loop = Loop()
        try await loop.running(start: .now) { try await loop.asleep(after: 1) }
        #expect(loop.count == 1)
    }

    @Test func gracefulShutdownEndsTheWaitWithoutAnotherRound() async throws {
        let loop = Loop()
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await loop.run(start: .now) }
                try await loop.asleep(after: 1)
                trigger.triggerGracefulShutdown()
                // Ends by itself: the clock never reaches the next round.
                try await group.waitForAll()
            }
        }
        #expect(loop.count == 1)
        #expect(loop.clock.sleepers == 0)
    }

    @Test func aLoopToldToStopBeforeItStartsRunsNoRound() async {
        let loop = Loop()
        await testGracefulShutdown { trigger in
            trigger.triggerGracefulShutdown()
            await loop.run(start: .now)
        }
        #expect(loop.count == 0)
    }

    /// A loop's own stop (one child of a group that goes on) ends its wait at once, like
    /// graceful shutdown, without another round and with the clock standing still.
    @Test func aStopSignalEndsTheWaitWithoutAnotherRound() async throws {
        let loop = Loop()
        let stop = StopSignal()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await loop.run(start: .now, until: stop) }
            try await loop.asleep(after: 1)
            stop.stop()
            // Ends by itself: nothing cancels it and the clock never reaches the next round.
            try await group.waitForAll()
        }
        #expect(loop.count == 1)
        #expect(loop.clock.sleepers == 0)
    }

    /// What a round saw of itself.
    final class Round: Sendable {
        let seen = Mutex((began: 0, finished: 0, cancelledInside: false))
    }

    /// A stop that comes during a round lets the round finish (it is no cancellation: the
    /// round's waits go on), then the loop ends.
    @Test func aStopDuringARoundLetsTheRoundFinishAndRunsNoOther() async throws {
        let clock = ManualClock()
        let stop = StopSignal()
        let gate = StopSignal()
        let round = Round()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await Periodic.run(every: PeriodicTests.interval, on: clock, start: .now, until: stop) {
                    round.seen.withLock { $0.began += 1 }
                    await gate.stopped()
                    round.seen.withLock {
                        $0.finished += 1
                        $0.cancelledInside = Task.isCancelled
                    }
                }
            }
            try await waitUntil("the round began") { round.seen.withLock { $0.began } == 1 }
            stop.stop()
            gate.stop()
            try await group.waitForAll()
        }
        let seen = round.seen.withLock { $0 }
        #expect(seen.began == 1 && seen.finished == 1)
        #expect(!seen.cancelledInside, "a stop is not a cancellation")
        #expect(clock.sleepers == 0)
    }

    @Test func aStopBeforeTheLoopStartsRunsNoRound() async {
        let loop = Loop()
        let stop = StopSignal()
        stop.stop()
        await loop.run(start: .now, until: stop)
        #expect(loop.count == 0)
    }
}
