import Testing

@testable import APNSTransport

/// The pool's machine (`HTTP2PoolStateMachine`) in every state a short run reaches, for each of
/// its configurations (`PoolWorld.Setup`), driven through `PoolWorld`, which carries out each
/// action as the transport and APNs would and checks the machine's rules after every step.
@Suite struct HTTP2PoolMachinePairTests {
    typealias Stimulus = PoolWorld.Stimulus
    typealias Setup = PoolWorld.Setup

    /// States worth overlapping events in, each reached by steps from a fresh pool.
    enum Base: String, CaseIterable, Sendable {
        case fresh, connecting, ready, full, parkedMany, grown, draining, dropped, dormant, idleRetired, shuttingDown, shutDown

        var steps: [Stimulus] {
            switch self {
            case .fresh: []
            case .connecting: [.send, .connect]
            case .ready: [.send, .connect, .settingsNone]
            case .full: Base.ready.steps + [.send, .send]
            case .parkedMany: [.send, .send, .send, .connect, .settingsOne, .send]
            // Answers while requests wait move the window; a connection is opened for it.
            case .grown: [.send, .connect, .settingsOne, .send, .send, .send, .answer, .answer, .connect, .settingsNone, .send]
            case .draining: Base.full.steps + [.goaway]
            case .dropped: Base.full.steps + [.drop]
            case .dormant: [.send, .connect, .settingsNone, .answer, .idleCheck, .idleCheck, .idleCheck]
            case .idleRetired: Base.grown.steps + [.answer, .answer, .answer, .answer, .idleCheck, .idleCheck, .idleCheck]
            case .shuttingDown: Base.parkedMany.steps + [.shutdown]
            case .shutDown: Base.ready.steps + [.answer, .shutdown]
            }
        }

        func world(_ setup: Setup) -> PoolWorld {
            var world = PoolWorld(setup)
            for step in steps { world.apply(step) }
            return world
        }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var setup: Setup
        var base: Base
        var testDescription: String { "\(setup) \(base)" }

        static let all = Setup.allCases.flatMap { setup in Base.allCases.map { Case(setup: setup, base: $0) } }
    }

    @Test(arguments: Case.all)
    func eachBaseIsWhatItsNameSays(_ test: Case) {
        let world = test.base.world(test.setup)
        #expect(world.violations.isEmpty, "\(world.violations)")
        let pool = world.pool
        switch test.base {
        case .fresh: #expect(pool.inFlight == 0 && world.loops.count == (test.setup == .firstUse ? 0 : 1))
        case .connecting: #expect(pool.count(.connecting) == 1 && pool.waiting == 1)
        case .ready: #expect(pool.count(.ready) >= 1 && world.streams.count == 1)
        case .full: #expect(pool.waiting >= 1)
        case .parkedMany: #expect(pool.waiting >= 2 && world.timers.count >= 1)
        case .grown: #expect(world.loops.count >= 2, "a connection opened for the window")
        case .draining: #expect(pool.count(.draining) == 1)
        case .dropped: #expect(world.connections.isEmpty && pool.inFlight == 0)
        case .dormant: #expect(pool.dormant == (test.setup == .firstUse))
        case .idleRetired: #expect(test.setup == .firstUse ? pool.dormant : pool.slots.dropFirst().allSatisfy { !$0.active })
        case .shuttingDown, .shutDown: #expect(pool.shuttingDown && pool.waiting == 0)
        }
    }

    /// Every ordered pair of events from every base state (a GOAWAY while requests are parked,
    /// a drop while shutting down, an idle check while a slot opens, a send into a dormant
    /// pool, ...): generated, not picked. The world checks the rules after every step, then
    /// lets what is under way finish and checks where the pool came to rest.
    @Test(arguments: Case.all)
    func everyPairOfEventsLeavesAPoolThatCouldRun(_ test: Case) {
        for first in Stimulus.allCases {
            for second in Stimulus.allCases {
                var world = test.base.world(test.setup)
                world.apply(first)
                world.apply(second)
                world.quiesce()
                Self.expectAtRest(&world)
                #expect(world.violations.isEmpty, "\(test.base) then \(first), \(second): \(world.violations)")
            }
        }
    }

    /// Where a quiet pool must be, whatever happened before: nothing parked or out; every
    /// request answered once; shut down, every connection closed and every loop returned, and a
    /// new request refused; running, a new request gets a stream.
    static func expectAtRest(_ world: inout PoolWorld) {
        if !world.parked.isEmpty || !world.streams.isEmpty { world.violation("at rest with requests parked or out") }
        if world.ended.count != world.nextRequest { world.violation("\(world.nextRequest - world.ended.count) requests never answered") }
        let request = world.nextRequest
        world.apply(.send)
        world.quiesce()
        if world.shutDown {
            if !world.connections.isEmpty || !world.loops.isEmpty { world.violation("shut down with connections or loops left") }
            if world.streamed.contains(request) { world.violation("a stream after shutdown") }
        } else if !world.streamed.contains(request) {
            world.violation("running, but a new request got no stream")
        }
    }
}
