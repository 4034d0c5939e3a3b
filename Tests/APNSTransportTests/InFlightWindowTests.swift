/// The in-flight window as plain values: Little's law with headroom, doubling while full, the
/// bounds (floor, budget ceiling, stream capacity), shrinking when demand falls, and the least
/// round trip's lifetime. Time is nanoseconds given by the test; nothing here waits.
import Testing

@testable import APNSTransport

@Suite struct InFlightWindowTests {
    static let ms: UInt64 = 1_000_000

    /// A simulated path with a propagation delay `rtt` and a backlog of `demand` jobs per
    /// round (endless by default): every round the window is filled and each send is answered
    /// when the round ends. With a `throughput` bottleneck more in flight only queues (Little:
    /// the round lasts in flight ÷ throughput), and only the first answer of a round sees no
    /// queue. Returns the targets after each round.
    func drive(
        _ window: inout InFlightWindow, rtt: UInt64, periods: Int, capacity: Int = 100_000,
        demand: Int? = nil, throughput: Double? = nil, from start: UInt64 = 0
    ) -> (targets: [Int], end: UInt64) {
        var now = start
        var targets: [Int] = []
        for _ in 0..<periods {
            let sending = min(window.target, demand ?? .max)
            let round = max(rtt, throughput.map { UInt64(Double(sending) * 1e9 / $0) } ?? 0)
            for _ in 0..<sending { window.sent() }
            now += round
            for index in 0..<sending {
                _ = window.ended(rtt: index == 0 ? rtt : round, answered: true, now: now, streamCapacity: capacity)
            }
            targets.append(window.target)
        }
        return (targets, now)
    }

    @Test func startsAtTheFloor() {
        let window = InFlightWindow(floor: 500, ceiling: 4000, now: 0)
        #expect(window.target == 500)
        #expect(window.inFlight == 0)
        #expect(window.rate == nil)
        #expect(window.minimumRTT == nil)
    }

    @Test func boundsAreSane() {
        let zero = InFlightWindow(floor: 0, ceiling: 0, now: 0)
        #expect(zero.floor == 1 && zero.ceiling == 1 && zero.target == 1)
        let inverted = InFlightWindow(floor: 500, ceiling: 100, now: 0)
        #expect(inverted.ceiling == 500)
    }

    @Test func growsByDoublingWhileFullAtALongRoundTripUpToTheCeiling() {
        var window = InFlightWindow(floor: 500, ceiling: 4000, now: 0)
        let (targets, _) = drive(&window, rtt: 50 * Self.ms, periods: 16)
        // Never more than double per period (a round trip), never over the ceiling, and it
        // reaches it.
        var previous = 500
        for target in targets {
            #expect(target <= previous * 2)
            #expect(target >= previous)
            previous = target
        }
        #expect(targets.last == 4000)
        #expect(targets.contains(1000))
    }

    @Test func theStreamCapacityBoundsGrowth() {
        var window = InFlightWindow(floor: 500, ceiling: 100_000, now: 0)
        let (targets, _) = drive(&window, rtt: 50 * Self.ms, periods: 10, capacity: 2000)
        #expect(targets.allSatisfy { $0 <= 2000 })
        #expect(targets.last == 2000)
    }

    @Test func aCapacityUnderTheFloorDoesNotShrinkIt() {
        // One stream until the first token is accepted: waiting jobs wait in the pool.
        var window = InFlightWindow(floor: 500, ceiling: 4000, now: 0)
        let (targets, _) = drive(&window, rtt: 50 * Self.ms, periods: 5, capacity: 1)
        #expect(targets.allSatisfy { $0 == 500 })
    }

    @Test func aShortRoundTripStaysAtTheFloor() {
        // 0.3 ms and a path that does 30,000 jobs/s: 9 in flight fill it; the floor is plenty.
        var window = InFlightWindow(floor: 500, ceiling: 4000, now: 0)
        let (targets, _) = drive(&window, rtt: 300_000, periods: 200, throughput: 30_000)
        #expect(targets.allSatisfy { $0 == 500 })
    }

    @Test func doesNotGrowWhenNotFull() {
        var window = InFlightWindow(floor: 100, ceiling: 4000, now: 0)
        // Only 50 jobs at a time arrive: the window is never full.
        let (targets, _) = drive(&window, rtt: 50 * Self.ms, periods: 10, demand: 50)
        #expect(targets.allSatisfy { $0 == 100 })
    }

    @Test func shrinksTowardsDemandButNotUnderTheFloor() {
        var window = InFlightWindow(floor: 200, ceiling: 8000, now: 0)
        let (grown, end) = drive(&window, rtt: 50 * Self.ms, periods: 24)
        #expect(grown.last == 8000)
        // The backlog is gone: 300 at a time. Little: 300 in flight × 2 = 600.
        let (shrunk, end2) = drive(&window, rtt: 50 * Self.ms, periods: 6, demand: 300, from: end)
        #expect(shrunk.last == 600)
        // Idle for a minute, then one job: the rate over the long period is tiny.
        window.sent()
        _ = window.ended(rtt: 50 * Self.ms, answered: true, now: end2 + 60_000 * Self.ms, streamCapacity: 100_000)
        #expect(window.target == 200)
    }

    @Test func queueingDelayDoesNotFeedGrowth() {
        // A bottleneck elsewhere: the path sustains 10,000 jobs/s with a 10 ms propagation
        // delay; more in flight only makes each round trip longer.
        var window = InFlightWindow(floor: 50, ceiling: 100_000, now: 0)
        _ = drive(&window, rtt: 10 * Self.ms, periods: 40, throughput: 10_000)
        // 10,000/s × 10 ms = 100 in flight fill the path; the window stays near gain × that.
        #expect(window.target <= 200 * 2)
        #expect(window.target >= 100)
    }

    @Test func failuresCountAsCompletionsButNotAsRoundTrips() {
        var window = InFlightWindow(floor: 10, ceiling: 1000, now: 0)
        window.sent()
        _ = window.ended(rtt: 10_000 * Self.ms, answered: false, now: 10_000 * Self.ms, streamCapacity: 100)
        #expect(window.minimumRTT == nil)
        #expect(window.inFlight == 0)
        #expect(window.rate != nil)
        #expect(window.target == 10)
    }

    @Test func theLeastRoundTripIsForgottenAfterItsLifetime() {
        var window = InFlightWindow(floor: 1, ceiling: 1000, now: 0)
        window.sent()
        _ = window.ended(rtt: 5 * Self.ms, answered: true, now: 30 * Self.ms, streamCapacity: 100)
        #expect(window.minimumRTT == 5 * Self.ms)
        // A slower route: 80 ms from now on. Within the lifetime the old least round trip stays.
        var now: UInt64 = 30 * Self.ms
        while now < InFlightWindow.minimumRTTLifetime / 2 {
            window.sent()
            now += 80 * Self.ms
            _ = window.ended(rtt: 80 * Self.ms, answered: true, now: now, streamCapacity: 100)
        }
        #expect(window.minimumRTT == 5 * Self.ms)
        while now < InFlightWindow.minimumRTTLifetime * 2 {
            window.sent()
            now += 80 * Self.ms
            _ = window.ended(rtt: 80 * Self.ms, answered: true, now: now, streamCapacity: 100)
        }
        #expect(window.minimumRTT == 80 * Self.ms)
    }

    @Test func endedReturnsTheTargetOnlyWhenItChanges() {
        var window = InFlightWindow(floor: 100, ceiling: 1000, now: 0)
        var changes: [Int] = []
        var now: UInt64 = 0
        for _ in 0..<12 {
            for _ in 0..<window.target { window.sent() }
            now += 50 * Self.ms
            for _ in 0..<window.target {
                if let changed = window.ended(rtt: 50 * Self.ms, answered: true, now: now, streamCapacity: 10_000) {
                    changes.append(changed)
                }
            }
        }
        // Doubling once a round trip, as TCP's slow start (a period of two round trips gave
        // 200, 300, 500, 800, 1000: each step a round late).
        #expect(changes == [200, 400, 800, 1000])
    }

    @Test(arguments: [1, 7, 100, 500, 3000])
    func theRuleStaysWithinItsBoundsForAnyInput(floor: Int) {
        for target in [1, floor, floor * 3, 65_535] {
            for full in [false, true] {
                for rate in [0.0, 1.0, 1e3, 1e5, 1e9] {
                    for rtt in [nil, 0, 1_000, 50_000_000, UInt64.max / 4] as [UInt64?] {
                        for capacity in [0, 1, 2000, 1_000_000] {
                            let next = InFlightWindow.next(
                                target: target, full: full, rate: rate, minimumRTT: rtt, floor: floor, ceiling: 4000,
                                streamCapacity: capacity)
                            let upper = min(4000, max(floor, capacity))
                            #expect(next <= max(upper, floor))
                            #expect(next >= min(floor, upper))
                            if !full, target >= floor, target <= upper { #expect(next <= target) }
                            if full { #expect(next <= max(floor, target * 2)) }
                        }
                    }
                }
            }
        }
    }
}
