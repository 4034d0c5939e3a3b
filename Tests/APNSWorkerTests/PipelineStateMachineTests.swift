import Foundation
import Testing

@testable import APNSWorker

/// A bundle's whole state without a socket, a task or a real clock (`PipelineStateMachine`),
/// driven through `PipelineWorld`, which carries out each action as the pipeline and the broker
/// would and records whatever a real pipeline could not do.
@Suite struct PipelineStateMachineTests {
    typealias Stimulus = PipelineWorld.Stimulus

    /// States worth overlapping events in, each reached by steps from a fresh pipeline.
    enum Base: String, CaseIterable, Sendable {
        case consuming, full, held, probing, probeSent, paused, heldPaused, draining, drainingHeld

        var steps: [Stimulus] {
            switch self {
            case .consuming: [.consumerConfirms, .deliver]
            case .full: [.consumerConfirms, .deliver, .deliver, .deliver]
            case .held: [.consumerConfirms, .deliver, .deliver, .answerHeld, .consumerEnds]
            case .probing: Base.held.steps + [.timePasses]
            case .probeSent: Base.probing.steps + [.probeFinds]
            case .paused: [.consumerConfirms, .deliver, .pause, .consumerEnds]
            case .heldPaused: Base.held.steps + [.pause]
            case .draining: [.consumerConfirms, .deliver, .shutdown, .consumerEnds]
            case .drainingHeld: Base.held.steps + [.shutdown]
            }
        }

        func world() -> PipelineWorld {
            var world = PipelineWorld()
            for step in steps where !world.apply(step) { world.violation("base step \(step) could not happen") }
            return world
        }
    }

    @Test(arguments: Base.allCases)
    func eachBaseIsWhatItsNameSays(base: Base) {
        let world = base.world()
        #expect(world.violations.isEmpty, "\(world.violations)")
        let machine = world.machine
        switch base {
        case .consuming: #expect(machine.consumer == .consuming && machine.inFlight == 1)
        case .full: #expect(machine.inFlight == 2 && world.parked != nil)
        case .held: #expect(machine.isHeld && machine.consumer == .idle && machine.inFlight == 1 && world.timers.count == 1)
        case .probing: #expect(machine.probeTaking && machine.inFlight == 1)
        case .probeSent: #expect(world.jobs == [false, true])
        case .paused: #expect(machine.paused && machine.consumer == .idle)
        case .heldPaused: #expect(machine.paused && machine.isHeld)
        case .draining: #expect(machine.lifecycle != .running && world.timers.count == 1 && machine.inFlight == 1)
        case .drainingHeld: #expect(machine.isHeld && machine.lifecycle != .running)
        }
    }

    /// Every ordered pair of events, from every base state (pause while held, shutdown while
    /// probing, hold while draining, a probe's answer after a resume, ...): generated, not
    /// picked. After each pair the world lets what is under way finish and checks where the
    /// machine came to rest: a shut-down pipeline has finished once; a paused one neither
    /// consumes nor probes; a flowing one consumes; a held one probes when the interval passes.
    @Test(arguments: Base.allCases, Stimulus.allCases)
    func everyPairOfEventsLeavesAPipelineThatCouldRun(base: Base, first: Stimulus) {
        for second in Stimulus.allCases {
            var world = base.world()
            world.apply(first)
            world.apply(second)
            world.quiesce()
            Self.expectAtRest(&world)
            #expect(world.violations.isEmpty, "\(base) then \(first), \(second): \(world.violations)")
        }
    }

    /// Where a quiet pipeline must be, whatever happened before.
    static func expectAtRest(_ world: inout PipelineWorld) {
        let machine = world.machine
        switch machine.lifecycle {
        case .created:
            world.violation("never started")
        case .draining, .finished:
            if machine.lifecycle != .finished || world.finishes != 1 { world.violation("shut down but not finished once (\(machine.lifecycle))") }
        case .running:
            if machine.paused {
                if world.consumer != .none || world.probeOut { world.violation("paused yet consuming or probing") }
                // Resuming must take work again.
                world.apply(.resume)
                world.quiesce()
                world.apply(.timePasses)
                if world.consumer == .none && !world.probeOut { world.violation("resumed but neither consuming nor probing") }
            } else if machine.isHeld {
                if world.consumer != .none { world.violation("held yet consuming") }
                world.apply(.timePasses)
                if !world.probeOut { world.violation("held and the interval passed, but no probe") }
            } else if world.consumer != .live {
                world.violation("flowing but not consuming")
            }
        }
    }

    /// Triples from the states where most can go wrong at once: every event after every pair.
    @Test(arguments: [Base.probing, .probeSent, .heldPaused, .drainingHeld], Stimulus.allCases)
    func everyTripleFromAHoldLeavesAPipelineThatCouldRun(base: Base, first: Stimulus) {
        for second in Stimulus.allCases {
            for third in Stimulus.allCases {
                var world = base.world()
                world.apply(first)
                world.apply(second)
                world.apply(third)
                world.quiesce()
                Self.expectAtRest(&world)
                #expect(world.violations.isEmpty, "\(base) then \(first), \(second), \(third): \(world.violations)")
            }
        }
    }

    // MARK: - The hold breaker, as told to an operator

    @Test func theFirstHeldOutcomeAlertsOnceAndLaterOnesStaySilent() {
        var world = PipelineWorld()
        for step: Stimulus in [.consumerConfirms, .deliver, .deliver, .answerHeld] { world.apply(step) }
        #expect(world.machine.isHeld)
        #expect(world.consumer == .cancelling)
        world.apply(.answerHeld)
        #expect(world.alerts == 1)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test func probesComeOnlyAtTheIntervalOneAtATimeUntilOneSucceeds() {
        var world = Base.held.world()
        world.apply(.endUnsent)  // the straggler
        var machine = world.machine
        let t0 = world.now
        #expect(machine.tick(now: t0.advanced(by: .seconds(4))) == .none)
        #expect(machine.tick(now: t0.advanced(by: .seconds(5))).control == .probe)
        #expect(machine.tick(now: t0.advanced(by: .seconds(6))) == .none, "one probe at a time")
        #expect(machine.probeTaken(found: true, publishedAt: nil, now: t0.advanced(by: .seconds(6))).intake == .compose)
        let (settlement, stillHeld) = machine.answered(.hold(reason: "BadCertificate", status: 403), now: t0.advanced(by: .seconds(6)))
        #expect(settlement == .settle)
        #expect(stillHeld == PipelineWorld.Machine.Action(timer: t0.advanced(by: .seconds(11))), "no new alert, the next probe")
        #expect(machine.settled(probe: true, now: t0.advanced(by: .seconds(6))) == .none)
        #expect(machine.tick(now: t0.advanced(by: .seconds(10))) == .none)
        #expect(machine.tick(now: t0.advanced(by: .seconds(11))).control == .probe)
        _ = machine.probeTaken(found: true, publishedAt: nil, now: t0.advanced(by: .seconds(11)))
        let (_, resumed) = machine.answered(.healthy, now: t0.advanced(by: .seconds(12)))
        #expect(resumed == PipelineWorld.Machine.Action(control: .startConsumer, news: .resumed(heldFor: .seconds(12))))
        #expect(!machine.isHeld)
    }

    @Test func anEmptyQueueOrAProbeThatEndsUnsentReschedulesTheProbe() {
        var world = Base.probing.world()
        world.apply(.endUnsent)
        let t0 = world.now
        var machine = world.machine
        #expect(machine.probeTaken(found: false, publishedAt: nil, now: t0).action == .init(timer: t0.advanced(by: .seconds(5))))
        #expect(machine.tick(now: t0.advanced(by: .seconds(5))).control == .probe)
        // A malformed job as the probe says nothing of the credentials: held, probe again later.
        #expect(machine.probeTaken(found: true, publishedAt: nil, now: t0.advanced(by: .seconds(5))).intake == .compose)
        #expect(machine.settled(probe: true, now: t0.advanced(by: .seconds(6))) == .init(timer: t0.advanced(by: .seconds(11))))
        #expect(machine.isHeld)
    }

    // MARK: - Overlaps named in issue 29

    @Test func aShutdownWhileProbingSendsNothingMoreAndFinishesOnceTheGetReturns() {
        var world = Base.probing.world()
        world.apply(.endUnsent)
        world.apply(.shutdown)
        #expect(world.finishes == 0, "the probe's basic.get is still out")
        world.apply(.probeFinds)
        #expect(world.nacked == 1, "the job taken goes back unsent")
        #expect(world.jobs.isEmpty)
        #expect(world.finishes == 1)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test func aPauseWhileHeldStopsTheProbesAndAResumeProbesAtOnceWhenDue() {
        var world = Base.held.world()
        world.apply(.pause)
        world.apply(.timePasses)
        #expect(!world.probeOut)
        world.apply(.resume)
        #expect(world.probeOut, "the interval has passed: probe at once")
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test func aHoldWhileDrainingAlertsButStartsNothing() {
        var world = PipelineWorld()
        for step: Stimulus in [.consumerConfirms, .deliver, .shutdown, .consumerEnds, .answerHeld] { world.apply(step) }
        #expect(world.alerts == 1)
        #expect(world.consumer == .none && !world.probeOut && world.timers.count == 1)
        #expect(world.finishes == 1)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test func atTheShutdownDeadlineJobsAreAbandonedAndTheirLateAnswersDropped() {
        var world = Base.draining.world()
        world.apply(.timePasses)
        #expect(world.finishes == 0)
        world.apply(.deadlinePasses)
        #expect(world.finishes == 1)
        var machine = world.machine
        #expect(machine.answered(.healthy, now: world.now).0 == .drop)
        #expect(machine.inFlight == 0)
    }

    @Test func aDeliveryOverTheBoundWaitsForRoomAndIsSentBackOnAPause() throws {
        var world = Base.full.world()
        let parked = try #require(world.parked)
        var machine = world.machine
        #expect(machine.settled(probe: false, now: world.now).wake == .init(waiter: parked, admitted: true))
        #expect(machine.inFlight == 2, "the settled job left, the waiting one came in")
        world.apply(.pause)
        #expect(world.parked == nil && world.nacked == 1)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test func theNewestPublishTimeIsKept() {
        var world = Base.consuming.world()
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(world.machine.lastTakenPublishedAt == nil)
        _ = world.machine.delivered(publishedAt: t0)
        _ = world.machine.settled(probe: false, now: world.now)
        _ = world.machine.delivered(publishedAt: t0.addingTimeInterval(-600))  // an old job back from a retry queue
        #expect(world.machine.lastTakenPublishedAt == t0)
    }
}
