/// The pool's connections opened as the in-flight window needs them and closed when idle, as
/// plain values: which slot opens when, never past the most, never before the open ones show
/// what they carry, and which close after an idle period.
import APNSModel
import Testing

@testable import APNSTransport

@Suite struct HTTP2PoolDynamicSlotsTests {
    typealias Pool = TestPool

    func started(_ pool: Pool) -> Pool {
        var pool = pool
        _ = pool.start()
        return pool
    }

    @Test func onlyTheBaseSlotsAreActiveAtFirst() {
        let pool = Pool(connections: 2, maxConnections: 5, streamCap: 1000, oneStreamUntilFirstAnswer: false)
        #expect(pool.slots.count == 5)
        #expect(pool.slots.map(\.active) == [true, true, false, false, false])
        #expect((0..<5).map { pool.isActive(slot: $0) } == [true, true, false, false, false])
        // A most under the base is the base.
        #expect(Pool(connections: 3, maxConnections: 1, streamCap: 10, oneStreamUntilFirstAnswer: false).slots.count == 3)
        #expect(Pool(connections: 2, streamCap: 10, oneStreamUntilFirstAnswer: false).slots.count == 2)
    }

    @Test func opensASlotWhenTheWindowWantsMoreThanTheOpenOnesCarry() {
        var pool = started(Pool(connections: 1, maxConnections: 3, streamCap: 1000, oneStreamUntilFirstAnswer: false))
        #expect(pool.slotToOpen(wanted: 500) == nil, "the base slot is not ready yet: its limit is unknown")
        pool.ready(0, serverLimit: 100)
        #expect(pool.slotToOpen(wanted: 100) == nil, "one connection carries 100")
        #expect(pool.slotToOpen(wanted: 101) == 1)
        #expect(pool.slotToOpen(wanted: 500) == nil, "one at a time: slot 1 is not ready")
        pool.ready(1, serverLimit: 100)
        #expect(pool.slotToOpen(wanted: 500) == 2)
        pool.ready(2, serverLimit: 100)
        #expect(pool.slotToOpen(wanted: 10_000) == nil, "never more than the most")
        #expect(pool.count(.ready) == 3)
    }

    /// The same rule through the events: requests parked while the window (60 here) wants
    /// more than the ready connection carries open the next slot when SETTINGS arrive.
    @Test func parkedRequestsOpenTheNextSlotThroughTheEvents() {
        var pool = Pool(
            connections: 1, maxConnections: 2, streamCap: 1000, oneStreamUntilFirstAnswer: false,
            window: InFlightWindow(floor: 60, ceiling: 60, now: 0))
        #expect(pool.start().opens == [0])
        let g = pool.connecting(slot: 0)
        _ = pool.connected(slot: 0, generation: g, connection: "c0")
        #expect(pool.acquire("w").lease == nil)
        let action = pool.settings(slot: 0, generation: g, maxConcurrentStreams: 10)
        #expect(action.resumed == ["w"])
        #expect(action.opens.isEmpty, "nobody parked any more")
        for _ in 0..<9 { #expect(pool.acquire("w").lease != nil) }
        #expect(pool.acquire("x").lease == nil)
        let again = pool.settings(slot: 0, generation: g, maxConcurrentStreams: 10)
        #expect(again.opens == [1], "10 streams carried, 60 wanted")
        if case .opened(let slot, let window) = again.news { #expect(slot == 1 && window == 60) } else { Issue.record("no news") }
    }

    @Test func withTokensNoSlotOpensBeforeTheFirstTokenIsAccepted() throws {
        var pool = started(Pool(connections: 1, maxConnections: 2, streamCap: 1000, oneStreamUntilFirstAnswer: true))
        pool.ready(0, serverLimit: 1000)
        #expect(pool.slotToOpen(wanted: 5000) == nil, "one stream until the token is accepted says nothing")
        let lease = try #require(pool.acquire("w").lease)
        _ = pool.release(lease, answered: true)
        #expect(pool.slotToOpen(wanted: 5000) == 1)
    }

    @Test func theStreamCapacityCountsSlotsThatCanStillOpen() {
        var pool = started(Pool(connections: 1, maxConnections: 3, streamCap: 1000, oneStreamUntilFirstAnswer: false))
        #expect(pool.streamCapacity == 3000)
        pool.ready(0, serverLimit: 100)
        #expect(pool.streamCapacity == 2100)
    }

    /// A pool that carried nothing (no stream, nobody waiting) for `poolIdleChecks` idle checks
    /// in a row closes its base connections too and is dormant; any activity starts the count
    /// again; its next send reopens the base slots. Time is the checks themselves.
    @Test func aPoolIdleForItsIdleChecksClosesEveryConnectionAndReopensForTheNextJob() throws {
        var pool = Pool(connections: 2, maxConnections: 3, streamCap: 1000, oneStreamUntilFirstAnswer: false, poolIdleChecks: 3)
        #expect(pool.start().opens == [0, 1])
        pool.ready(0)
        pool.ready(1)
        #expect(pool.idleCheck().closes.isEmpty)
        #expect(pool.idleCheck().closes.isEmpty)
        // A job: the count starts again.
        let lease = try #require(pool.acquire("w").lease)
        #expect(pool.idleCheck().closes.isEmpty, "a stream in flight")
        _ = pool.release(lease, answered: true)
        #expect(pool.idleCheck().closes.isEmpty)
        #expect(pool.idleCheck().closes.isEmpty)
        #expect(!pool.dormant)
        // The third quiet check in a row: every connection closes, nothing is active.
        let idle = pool.idleCheck()
        #expect(idle.closes.sorted() == ["c0", "c1"])
        #expect(idle.news == .dormant(connections: 2))
        #expect(pool.dormant)
        #expect(pool.slots.map(\.active) == [false, false, false])
        #expect(!pool.isActive(slot: 0) && !pool.isActive(slot: 1), "their connection loops end")
        #expect(pool.idleCheck().closes.isEmpty, "a dormant pool has nothing more to close")
        // The loops ended; the next send reopens the base slots (not the extra one).
        for slot in 0..<2 {
            _ = pool.closed(slot: slot, generation: pool.slots[slot].generation)
            #expect(pool.loopEnded(slot: slot).opens.isEmpty)
        }
        let reopen = pool.sendBegan(now: 0)
        #expect(reopen.opens == [0, 1])
        #expect(reopen.news == .reopened(connections: 2))
        #expect(!pool.dormant)
        #expect(pool.slots.map(\.active) == [true, true, false])
        #expect(pool.sendBegan(now: 0).opens.isEmpty, "once")
    }

    /// A send that reopens a dormant pool while a base slot's loop is still ending: that loop
    /// is not started twice, and it is started again as soon as it ends.
    @Test func aLoopEndingAsThePoolReopensIsStartedAgainWhenItEnds() {
        var pool = Pool(connections: 1, streamCap: 1000, oneStreamUntilFirstAnswer: false, poolIdleChecks: 1)
        _ = pool.start()
        pool.ready(0)
        #expect(pool.idleCheck().closes == ["c0"])
        #expect(pool.sendBegan(now: 0).opens.isEmpty, "its loop has not returned yet")
        #expect(pool.loopEnded(slot: 0).opens == [0])
    }

    @Test func withoutPoolIdleChecksTheBaseConnectionsStay() {
        var pool = started(Pool(connections: 1, streamCap: 1000, oneStreamUntilFirstAnswer: false))
        pool.ready(0)
        for _ in 0..<100 { #expect(pool.idleCheck().closes.isEmpty) }
        #expect(!pool.dormant)
        #expect(pool.slots[0].active)
    }

    @Test func anOpenedSlotIdleForAWholePeriodIsRetiredAndReportedIdle() throws {
        var pool = started(Pool(connections: 1, maxConnections: 2, streamCap: 1000, oneStreamUntilFirstAnswer: false))
        pool.ready(0, serverLimit: 1)
        #expect(pool.slotToOpen(wanted: 2) == 1)
        pool.ready(1, serverLimit: 1)
        // Both carry a stream: neither is idle.
        let a = try #require(pool.acquire("a").lease)
        let b = try #require(pool.acquire("b").lease)
        #expect(Set([a.slot, b.slot]) == [0, 1])
        #expect(pool.idleCheck().closes.isEmpty)
        _ = pool.release(a, answered: true)
        _ = pool.release(b, answered: true)
        #expect(pool.idleCheck().closes.isEmpty, "one quiet check is not a whole period")
        #expect(pool.idleCheck().closes == ["c1"], "a whole period with nothing: closed; the base slot stays")
        #expect(!pool.isActive(slot: 1))
        #expect(pool.slots[1].state == .draining)
        #expect(pool.connectionStates()[.idle] == 1)
        // Its connection closes; its loop ends; it can be opened again later.
        let generation = pool.slots[1].generation
        _ = pool.closed(slot: 1, generation: generation)
        #expect(pool.slotToOpen(wanted: 5) == nil, "its old loop has not ended yet")
        #expect(pool.loopEnded(slot: 1).opens.isEmpty)
        #expect(pool.slotToOpen(wanted: 5) == 1)
        #expect(pool.isActive(slot: 1))
    }

    @Test func theBaseSlotsAreNeverRetired() {
        var pool = started(Pool(connections: 2, maxConnections: 2, streamCap: 1000, oneStreamUntilFirstAnswer: false))
        pool.ready(0)
        pool.ready(1)
        for _ in 0..<5 { #expect(pool.idleCheck().closes.isEmpty) }
        #expect(pool.count(.ready) == 2)
    }

    @Test func shuttingDownOpensNothing() {
        var pool = started(Pool(connections: 1, maxConnections: 3, streamCap: 10, oneStreamUntilFirstAnswer: false))
        pool.ready(0, serverLimit: 10)
        _ = pool.shutdown()
        #expect(pool.slotToOpen(wanted: 1000) == nil)
        #expect(!pool.isActive(slot: 0))
    }
}
