/// The connection pool's state machine with plain values: stream limits, parked requests and
/// their deadlines, GOAWAY draining, reconnect generations and shutdown.
import APNSModel
import Testing

@testable import APNSTransport

@Suite struct HTTP2PoolStateMachineTests {
    typealias Pool = TestPool

    func readyPool(connections: Int, serverLimit: Int?, cap: Int = 1000, token: Bool = false) -> (Pool, [Int]) {
        var pool = Pool(connections: connections, streamCap: cap, oneStreamUntilFirstAnswer: token)
        _ = pool.start()
        var generations: [Int] = []
        for slot in 0..<connections {
            let g = pool.connecting(slot: slot)
            _ = pool.connected(slot: slot, generation: g, connection: "c\(slot)")
            _ = pool.settings(slot: slot, generation: g, maxConcurrentStreams: serverLimit)
            generations.append(g)
        }
        return (pool, generations)
    }

    @Test func waitsUntilSettingsArrive() {
        var pool = Pool(connections: 1, streamCap: 100, oneStreamUntilFirstAnswer: false)
        #expect(pool.start().opens == [0])
        let g = pool.connecting(slot: 0)
        _ = pool.connected(slot: 0, generation: g, connection: "c0")
        #expect(pool.acquire("w1").lease == nil, "should wait")
        let action = pool.settings(slot: 0, generation: g, maxConcurrentStreams: 10)
        #expect(action.resumed == ["w1"])
        #expect(pool.count(.ready) == 1)
    }

    @Test func honoursTheServersStreamLimitAndQueuesTheRest() {
        var (pool, _) = readyPool(connections: 1, serverLimit: 3)
        var leases: [Pool.Lease] = []
        for i in 0..<3 { leases.append(pool.acquire("w\(i)").lease!) }
        #expect(pool.acquire("w10").lease == nil, "4th must wait")
        #expect(pool.acquire("w11").lease == nil, "5th must wait")
        #expect(pool.waiting == 2 && pool.inFlight == 3)
        // Each finished stream lets exactly one waiter in, in order.
        let afterFirst = pool.release(leases[0], answered: true)
        #expect(afterFirst.resumed == ["w10"])
        let afterSecond = pool.release(leases[1], answered: true)
        #expect(afterSecond.resumed == ["w11"])
        #expect(pool.waiting == 0 && pool.inFlight == 3)
    }

    @Test func tokenAuthUsesOneStreamUntilTheFirstAnswer() {
        var (pool, _) = readyPool(connections: 1, serverLimit: 1000, token: true)
        let first = pool.acquire("a").lease!
        #expect(pool.acquire("b").lease == nil, "must wait")
        #expect(pool.acquire("c").lease == nil, "must wait")
        let action = pool.release(first, answered: true)
        #expect(action.resumed == ["b", "c"])
    }

    @Test func spreadsOverConnections() {
        var (pool, _) = readyPool(connections: 4, serverLimit: 100)
        let slots = (0..<8).map { _ in pool.acquire("w").lease!.slot }
        #expect(slots.sorted() == [0, 0, 1, 1, 2, 2, 3, 3])
    }

    @Test func ourCapAppliesUnderTheServers() {
        var (pool, _) = readyPool(connections: 1, serverLimit: nil, cap: 2)
        #expect(pool.acquire("a").lease != nil)
        #expect(pool.acquire("b").lease != nil)
        #expect(pool.acquire("c").lease == nil, "cap is 2")
    }

    @Test func drainingConnectionTakesNoNewStreamsAndOldLeasesAreIgnored() {
        var (pool, gens) = readyPool(connections: 2, serverLimit: 1)
        let a = pool.acquire("a").lease!
        _ = pool.draining(slot: a.slot, generation: gens[a.slot])
        let b = pool.acquire("b").lease!
        #expect(b.slot != a.slot)
        #expect(pool.acquire("c").lease == nil, "must wait")
        // The draining connection closes and is replaced; the new one serves the waiter.
        guard case .reconnect(let wasUsed) = pool.closed(slot: a.slot, generation: gens[a.slot]).connection else {
            Issue.record("the loop connects again")
            return
        }
        #expect(wasUsed)
        let g2 = pool.connecting(slot: a.slot)
        _ = pool.connected(slot: a.slot, generation: g2, connection: "new")
        let action = pool.settings(slot: a.slot, generation: g2, maxConcurrentStreams: 1)
        #expect(action.resumed == ["c"] && action.resumedLeases.first?.connection == "new")
        // Releasing the lease of the old connection does not touch the new one's count.
        _ = pool.release(a, answered: true)
        #expect(pool.slots[a.slot].inFlight == 1)
    }

    @Test func aConnectionDrainingAfterSettingsStillCountsAsHavingSentThem() {
        // The handshake deadline asks this: a GOAWAY soon after SETTINGS must not make a
        // connection that is still answering its streams look like one that never spoke HTTP/2.
        var pool = Pool(connections: 1, streamCap: 100, oneStreamUntilFirstAnswer: false)
        _ = pool.start()
        let g = pool.connecting(slot: 0)
        _ = pool.connected(slot: 0, generation: g, connection: "c0")
        #expect(!pool.settingsArrived(slot: 0, generation: g), "no SETTINGS yet")
        _ = pool.settings(slot: 0, generation: g, maxConcurrentStreams: 10)
        #expect(pool.settingsArrived(slot: 0, generation: g))
        _ = pool.draining(slot: 0, generation: g)
        #expect(pool.settingsArrived(slot: 0, generation: g), "draining after it was ready")
        _ = pool.closed(slot: 0, generation: g)
        let next = pool.connecting(slot: 0)
        #expect(!pool.settingsArrived(slot: 0, generation: g), "an old generation")
        _ = pool.connected(slot: 0, generation: next, connection: "c1")
        _ = pool.draining(slot: 0, generation: next)
        #expect(!pool.settingsArrived(slot: 0, generation: next), "draining before any SETTINGS")
    }

    /// A parked request is answered `timedOut` when the timer at its deadline fires, not
    /// before; one timer, asked again for the next deadline.
    @Test func aParkedRequestTimesOutAtItsDeadlineByOneTimer() {
        var (pool, _) = readyPool(connections: 1, serverLimit: 1)
        let a = pool.acquire("a").lease!
        #expect(pool.acquire("b", deadline: 100).action.timer == .schedule(at: 100))
        #expect(pool.acquire("c", deadline: 200).action.timer == .none, "the timer at 100 comes first")
        #expect(pool.deadlinesPassed(now: 99).failed.isEmpty, "a timer early by the clock answers nobody")
        let due = pool.deadlinesPassed(now: 100)
        #expect(due.failed == ["b"] && due.timer == .schedule(at: 200))
        #expect(pool.waiting == 1)
        let action = pool.release(a, answered: true)
        #expect(action.resumed == ["c"])
        #expect(pool.deadlinesPassed(now: 200).failed.isEmpty, "c was given a stream")
    }

    @Test func shutdownReleasesWaitersAndClosesWhenDrained() {
        var (pool, _) = readyPool(connections: 2, serverLimit: 1)
        let a = pool.acquire("a").lease!
        _ = pool.acquire("b").lease!
        _ = pool.acquire("c")
        let shutdown = pool.shutdown()
        #expect(shutdown.failed == ["c"])
        #expect(shutdown.closes.isEmpty)
        #expect(shutdown.timer == .cancel)
        #expect(pool.acquire("d").action.refused, "must refuse")
        let action = pool.release(a, answered: true)
        #expect(action.closes == ["c\(a.slot)"])
    }

    /// With `connectOnFirstUse` nothing opens until the first send, whether it comes before
    /// the transport runs or after; the base slots open once.
    @Test func aPoolWaitingForFirstUseOpensOnItsFirstSend() {
        var pool = Pool(connections: 2, streamCap: 10, oneStreamUntilFirstAnswer: false, connectOnFirstUse: true)
        #expect(pool.start().opens.isEmpty)
        #expect(pool.connectionStates()[.idle] == 2)
        #expect(pool.sendBegan(now: 0).opens == [0, 1])
        #expect(pool.sendBegan(now: 0).opens.isEmpty, "once")
        var early = Pool(connections: 1, streamCap: 10, oneStreamUntilFirstAnswer: false, connectOnFirstUse: true)
        #expect(early.sendBegan(now: 0).opens.isEmpty, "not running yet")
        #expect(early.start().opens == [0])
    }
}
