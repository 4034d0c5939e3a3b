/// The pool's connections opened as the in-flight window needs them and closed when idle
/// (issue 38), as plain values: which slot opens when, never past the most, never before the
/// open ones show what they carry, and which close after an idle period.
import Testing

@testable import APNSTransport

@Suite struct HTTP2PoolDynamicSlotsTests {
    typealias Pool = ConnectionPoolStateMachine<String, String>

    /// Connects `slot` and lets the server's SETTINGS arrive.
    func ready(_ pool: inout Pool, _ slot: Int, serverLimit: Int? = 100) {
        let g = pool.connecting(slot: slot)
        _ = pool.connected(slot: slot, generation: g, connection: "c\(slot)")
        _ = pool.settings(slot: slot, generation: g, maxConcurrentStreams: serverLimit)
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
        var pool = Pool(connections: 1, maxConnections: 3, streamCap: 1000, oneStreamUntilFirstAnswer: false)
        #expect(pool.slotToOpen(wanted: 500) == nil, "the base slot is not ready yet: its limit is unknown")
        ready(&pool, 0, serverLimit: 100)
        #expect(pool.slotToOpen(wanted: 100) == nil, "one connection carries 100")
        #expect(pool.slotToOpen(wanted: 101) == 1)
        #expect(pool.slotToOpen(wanted: 500) == nil, "one at a time: slot 1 is not ready")
        pool.looping(slot: 1, true)
        ready(&pool, 1, serverLimit: 100)
        #expect(pool.slotToOpen(wanted: 500) == 2)
        pool.looping(slot: 2, true)
        ready(&pool, 2, serverLimit: 100)
        #expect(pool.slotToOpen(wanted: 10_000) == nil, "never more than the most")
        #expect(pool.count(.ready) == 3)
    }

    @Test func withTokensNoSlotOpensBeforeTheFirstTokenIsAccepted() throws {
        var pool = Pool(connections: 1, maxConnections: 2, streamCap: 1000, oneStreamUntilFirstAnswer: true)
        ready(&pool, 0, serverLimit: 1000)
        #expect(pool.slotToOpen(wanted: 5000) == nil, "one stream until the token is accepted says nothing")
        guard case .leased(let lease) = pool.acquire(id: 1, waiter: "w") else { Issue.record("no lease"); return }
        _ = pool.release(lease, answered: true)
        #expect(pool.slotToOpen(wanted: 5000) == 1)
    }

    @Test func theStreamCapacityCountsSlotsThatCanStillOpen() {
        var pool = Pool(connections: 1, maxConnections: 3, streamCap: 1000, oneStreamUntilFirstAnswer: false)
        #expect(pool.streamCapacity == 3000)
        ready(&pool, 0, serverLimit: 100)
        #expect(pool.streamCapacity == 2100)
    }

    /// Issue 39: a pool that carried nothing (no stream, nobody waiting) for `poolIdleChecks`
    /// idle checks in a row closes its base connections too and is dormant; any activity starts
    /// the count again; its next job reopens the base slots. Time is the checks themselves.
    @Test func aPoolIdleForItsIdleChecksClosesEveryConnectionAndReopensForTheNextJob() throws {
        var pool = Pool(connections: 2, maxConnections: 3, streamCap: 1000, oneStreamUntilFirstAnswer: false, poolIdleChecks: 3)
        pool.looping(slot: 0, true)
        pool.looping(slot: 1, true)
        ready(&pool, 0)
        ready(&pool, 1)
        #expect(pool.idleCheck().isEmpty)
        #expect(pool.idleCheck().isEmpty)
        // A job: the count starts again.
        guard case .leased(let lease) = pool.acquire(id: 1, waiter: "w") else {
            Issue.record("no lease")
            return
        }
        #expect(pool.idleCheck().isEmpty, "a stream in flight")
        _ = pool.release(lease, answered: true)
        #expect(pool.idleCheck().isEmpty)
        #expect(pool.idleCheck().isEmpty)
        #expect(!pool.dormant)
        // The third quiet check in a row: every connection closes, nothing is active.
        #expect(pool.idleCheck().sorted() == ["c0", "c1"])
        #expect(pool.dormant)
        #expect(pool.slots.map(\.active) == [false, false, false])
        #expect(!pool.isActive(slot: 0) && !pool.isActive(slot: 1), "their connection loops end")
        #expect(pool.idleCheck().isEmpty, "a dormant pool has nothing more to close")
        // The loops ended; the next job reopens the base slots (not the extra one).
        for slot in 0..<2 {
            pool.looping(slot: slot, false)
            _ = pool.closed(slot: slot, generation: pool.slots[slot].generation)
        }
        #expect(pool.reopen() == [0, 1])
        #expect(!pool.dormant)
        #expect(pool.slots.map(\.active) == [true, true, false])
        #expect(pool.reopen().isEmpty, "once")
    }

    @Test func withoutPoolIdleChecksTheBaseConnectionsStay() {
        var pool = Pool(connections: 1, streamCap: 1000, oneStreamUntilFirstAnswer: false)
        ready(&pool, 0)
        for _ in 0..<100 { #expect(pool.idleCheck().isEmpty) }
        #expect(!pool.dormant)
        #expect(pool.slots[0].active)
    }

    @Test func anOpenedSlotIdleForAWholePeriodIsRetiredAndReportedIdle() throws {
        var pool = Pool(connections: 1, maxConnections: 2, streamCap: 1000, oneStreamUntilFirstAnswer: false)
        ready(&pool, 0, serverLimit: 1)
        #expect(pool.slotToOpen(wanted: 2) == 1)
        pool.looping(slot: 1, true)
        ready(&pool, 1, serverLimit: 1)
        // Both carry a stream: neither is idle.
        guard case .leased(let a) = pool.acquire(id: 1, waiter: "a"), case .leased(let b) = pool.acquire(id: 2, waiter: "b") else {
            Issue.record("no leases")
            return
        }
        #expect(Set([a.slot, b.slot]) == [0, 1])
        #expect(pool.idleCheck().isEmpty)
        _ = pool.release(a, answered: true)
        _ = pool.release(b, answered: true)
        #expect(pool.idleCheck().isEmpty, "one quiet check is not a whole period")
        #expect(pool.idleCheck() == ["c1"], "a whole period with nothing: closed; the base slot stays")
        #expect(!pool.isActive(slot: 1))
        #expect(pool.slots[1].state == .draining)
        // Its connection closes; its loop ends; it can be opened again later.
        let generation = pool.slots[1].generation
        _ = pool.closed(slot: 1, generation: generation)
        #expect(pool.slotToOpen(wanted: 5) == nil, "its old loop has not ended yet")
        pool.looping(slot: 1, false)
        #expect(pool.slotToOpen(wanted: 5) == 1)
        #expect(pool.isActive(slot: 1))
    }

    @Test func theBaseSlotsAreNeverRetired() {
        var pool = Pool(connections: 2, maxConnections: 2, streamCap: 1000, oneStreamUntilFirstAnswer: false)
        ready(&pool, 0)
        ready(&pool, 1)
        for _ in 0..<5 { #expect(pool.idleCheck().isEmpty) }
        #expect(pool.count(.ready) == 2)
    }

    @Test func shuttingDownOpensNothing() {
        var pool = Pool(connections: 1, maxConnections: 3, streamCap: 10, oneStreamUntilFirstAnswer: false)
        ready(&pool, 0, serverLimit: 10)
        _ = pool.beginShutdown()
        #expect(pool.slotToOpen(wanted: 1000) == nil)
        #expect(!pool.isActive(slot: 0))
    }
}
