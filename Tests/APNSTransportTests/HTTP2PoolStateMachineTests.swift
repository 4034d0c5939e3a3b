/// The connection pool's state machine with plain values: stream limits, waiters, GOAWAY
/// draining, reconnect generations and shutdown.
import Testing

@testable import APNSTransport

@Suite struct HTTP2PoolStateMachineTests {
    typealias Pool = ConnectionPoolStateMachine<String, String>

    func readyPool(connections: Int, serverLimit: Int?, cap: Int = 1000, token: Bool = false) -> (Pool, [Int]) {
        var pool = Pool(connections: connections, streamCap: cap, oneStreamUntilFirstAnswer: token)
        var generations: [Int] = []
        for slot in 0..<connections {
            let g = pool.connecting(slot: slot)
            _ = pool.connected(slot: slot, generation: g, connection: "c\(slot)")
            _ = pool.settings(slot: slot, generation: g, maxConcurrentStreams: serverLimit)
            generations.append(g)
        }
        return (pool, generations)
    }

    func lease(_ action: Pool.AcquireAction) -> Pool.Lease? {
        if case .leased(let l) = action { return l }
        return nil
    }

    @Test func waitsUntilSettingsArrive() {
        var pool = Pool(connections: 1, streamCap: 100, oneStreamUntilFirstAnswer: false)
        let g = pool.connecting(slot: 0)
        _ = pool.connected(slot: 0, generation: g, connection: "c0")
        guard case .wait = pool.acquire(id: 1, waiter: "w1") else { Issue.record("should wait"); return }
        let dispatch = pool.settings(slot: 0, generation: g, maxConcurrentStreams: 10)
        #expect(dispatch.resume.map(\.0) == ["w1"])
        #expect(pool.count(.ready) == 1)
    }

    @Test func honoursTheServersStreamLimitAndQueuesTheRest() {
        var (pool, _) = readyPool(connections: 1, serverLimit: 3)
        var leases: [Pool.Lease] = []
        for i in 0..<3 { leases.append(lease(pool.acquire(id: UInt64(i), waiter: "w\(i)"))!) }
        guard case .wait = pool.acquire(id: 10, waiter: "w10") else { Issue.record("4th must wait"); return }
        guard case .wait = pool.acquire(id: 11, waiter: "w11") else { Issue.record("5th must wait"); return }
        #expect(pool.waiting == 2 && pool.inFlight == 3)
        // Each finished stream lets exactly one waiter in, in order.
        let afterFirst = pool.release(leases[0], answered: true)
        #expect(afterFirst.resume.map(\.0) == ["w10"])
        let afterSecond = pool.release(leases[1], answered: true)
        #expect(afterSecond.resume.map(\.0) == ["w11"])
        #expect(pool.waiting == 0 && pool.inFlight == 3)
    }

    @Test func tokenAuthUsesOneStreamUntilTheFirstAnswer() {
        var (pool, _) = readyPool(connections: 1, serverLimit: 1000, token: true)
        let first = lease(pool.acquire(id: 1, waiter: "a"))!
        guard case .wait = pool.acquire(id: 2, waiter: "b") else { Issue.record("must wait"); return }
        guard case .wait = pool.acquire(id: 3, waiter: "c") else { Issue.record("must wait"); return }
        let dispatch = pool.release(first, answered: true)
        #expect(dispatch.resume.map(\.0) == ["b", "c"])
    }

    @Test func spreadsOverConnections() {
        var (pool, _) = readyPool(connections: 4, serverLimit: 100)
        let slots = (0..<8).map { lease(pool.acquire(id: UInt64($0), waiter: "w"))!.slot }
        #expect(slots.sorted() == [0, 0, 1, 1, 2, 2, 3, 3])
    }

    @Test func ourCapAppliesUnderTheServers() {
        var (pool, _) = readyPool(connections: 1, serverLimit: nil, cap: 2)
        #expect(lease(pool.acquire(id: 1, waiter: "a")) != nil)
        #expect(lease(pool.acquire(id: 2, waiter: "b")) != nil)
        guard case .wait = pool.acquire(id: 3, waiter: "c") else { Issue.record("cap is 2"); return }
    }

    @Test func drainingConnectionTakesNoNewStreamsAndOldLeasesAreIgnored() {
        var (pool, gens) = readyPool(connections: 2, serverLimit: 1)
        let a = lease(pool.acquire(id: 1, waiter: "a"))!
        pool.draining(slot: a.slot, generation: gens[a.slot])
        let b = lease(pool.acquire(id: 2, waiter: "b"))!
        #expect(b.slot != a.slot)
        guard case .wait = pool.acquire(id: 3, waiter: "c") else { Issue.record("must wait"); return }
        // The draining connection closes and is replaced; the new one serves the waiter.
        let wasUsed = pool.closed(slot: a.slot, generation: gens[a.slot])
        #expect(wasUsed)
        let g2 = pool.connecting(slot: a.slot)
        _ = pool.connected(slot: a.slot, generation: g2, connection: "new")
        let dispatch = pool.settings(slot: a.slot, generation: g2, maxConcurrentStreams: 1)
        #expect(dispatch.resume.map(\.0) == ["c"] && dispatch.resume.first?.1.connection == "new")
        // Releasing the lease of the old connection does not touch the new one's count.
        _ = pool.release(a, answered: true)
        #expect(pool.slots[a.slot].inFlight == 1)
    }

    @Test func aConnectionDrainingAfterSettingsStillCountsAsHavingSentThem() {
        // The handshake deadline asks this: a GOAWAY soon after SETTINGS must not make a
        // connection that is still answering its streams look like one that never spoke HTTP/2.
        var pool = Pool(connections: 1, streamCap: 100, oneStreamUntilFirstAnswer: false)
        let g = pool.connecting(slot: 0)
        _ = pool.connected(slot: 0, generation: g, connection: "c0")
        #expect(!pool.settingsArrived(slot: 0, generation: g), "no SETTINGS yet")
        _ = pool.settings(slot: 0, generation: g, maxConcurrentStreams: 10)
        #expect(pool.settingsArrived(slot: 0, generation: g))
        pool.draining(slot: 0, generation: g)
        #expect(pool.settingsArrived(slot: 0, generation: g), "draining after it was ready")
        _ = pool.closed(slot: 0, generation: g)
        let next = pool.connecting(slot: 0)
        #expect(!pool.settingsArrived(slot: 0, generation: g), "an old generation")
        _ = pool.connected(slot: 0, generation: next, connection: "c1")
        pool.draining(slot: 0, generation: next)
        #expect(!pool.settingsArrived(slot: 0, generation: next), "draining before any SETTINGS")
    }

    @Test func waiterCanGiveUp() {
        var (pool, _) = readyPool(connections: 1, serverLimit: 1)
        let a = lease(pool.acquire(id: 1, waiter: "a"))!
        _ = pool.acquire(id: 2, waiter: "b")
        let removed = pool.removeWaiter(id: 2)
        let removedAgain = pool.removeWaiter(id: 2)
        #expect(removed == "b" && removedAgain == nil)
        let dispatch = pool.release(a, answered: true)
        #expect(dispatch.resume.isEmpty)
    }

    @Test func shutdownReleasesWaitersAndClosesWhenDrained() {
        var (pool, _) = readyPool(connections: 2, serverLimit: 1)
        let a = lease(pool.acquire(id: 1, waiter: "a"))!
        _ = lease(pool.acquire(id: 2, waiter: "b"))!
        _ = pool.acquire(id: 3, waiter: "c")
        let (waiters, close) = pool.beginShutdown()
        #expect(waiters == ["c"])
        #expect(close.isEmpty)
        guard case .shutdown = pool.acquire(id: 4, waiter: "d") else { Issue.record("must refuse"); return }
        let dispatch = pool.release(a, answered: true)
        #expect(dispatch.close == ["c\(a.slot)"])
    }
}
