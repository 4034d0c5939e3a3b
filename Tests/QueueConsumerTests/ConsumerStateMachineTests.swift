import Foundation
import Testing

@testable import QueueConsumer

/// A queue consumer's whole state without a socket, a task or a real clock
/// (`ConsumerStateMachine`), for each of its users' configurations (`ConsumerWorld.User`: a
/// bundle's pipeline, the registry's registration and group consumers), driven through
/// `ConsumerWorld`, which carries out each action as the shell and the broker would and records
/// whatever a real consumer could not do.
@Suite struct ConsumerStateMachineTests {
    typealias Stimulus = ConsumerWorld.Stimulus
    typealias User = ConsumerWorld.User

    /// States worth overlapping events in, each reached by steps from a fresh consumer.
    enum Base: String, CaseIterable, Sendable {
        case consuming, full, held, probing, probeSent, paused, heldPaused, heldAlongside, draining, drainingHeld
        /// The broker lost: the consumer failed, or a held consumer's probe did.
        case consumerFailed, probeFailed

        func steps(_ user: User) -> [Stimulus] {
            switch self {
            case .consuming: [.consumerConfirms, .deliver]
            case .full: [.consumerConfirms] + Array(repeating: .deliver, count: user.limit + 1)
            // With a bound of two, one job (the straggler) is still out when the hold begins.
            case .held: [.consumerConfirms] + Array(repeating: .deliver, count: user.limit) + [.answerHeld, .consumerEnds]
            case .probing: Base.held.steps(user) + [.timePasses]
            case .probeSent: Base.probing.steps(user) + [.probeFinds]
            case .paused: [.consumerConfirms, .deliver, .pause, .consumerEnds]
            case .heldPaused: Base.held.steps(user) + [.pause]
            case .heldAlongside: [.consumerConfirms, .deliver, .siblingHolds, .consumerEnds]
            case .draining: [.consumerConfirms, .deliver, .shutdown, .consumerEnds]
            case .drainingHeld: Base.held.steps(user) + [.shutdown]
            case .consumerFailed: [.consumerConfirms, .deliver, .consumerFails]
            case .probeFailed: Base.probing.steps(user) + [.probeFails]
            }
        }

        func applies(to user: User) -> Bool { steps(user).allSatisfy(user.allows) }

        func world(_ user: User) -> ConsumerWorld {
            var world = ConsumerWorld(user)
            for step in steps(user) where !world.apply(step) { world.violation("base step \(step) could not happen") }
            return world
        }
    }

    /// Every (user, base) the user can reach.
    struct Case: Sendable, CustomTestStringConvertible {
        var user: User
        var base: Base
        var testDescription: String { "\(user) \(base)" }

        static let all = User.allCases.flatMap { user in Base.allCases.filter { $0.applies(to: user) }.map { Case(user: user, base: $0) } }
        /// The states where most can go wrong at once.
        static let holds = all.filter { [.probing, .probeSent, .heldPaused, .heldAlongside, .drainingHeld, .consumerFailed, .probeFailed].contains($0.base) }
    }

    @Test func everyUserHasTheBasesItsConfigurationAllows() {
        #expect(Case.all.filter { $0.user == .bundle }.count == Base.allCases.count - 1, "all but held alongside")
        // No job probe, no pause: all but probe sent, paused and held paused.
        #expect(Case.all.filter { $0.user == .registrations }.count == Base.allCases.count - 3)
        #expect(Case.all.filter { $0.user == .groups }.count == Base.allCases.count - 3)
    }

    @Test(arguments: Case.all)
    func eachBaseIsWhatItsNameSays(_ test: Case) {
        let world = test.base.world(test.user)
        #expect(world.violations.isEmpty, "\(world.violations)")
        let machine = world.machine
        let straggler = test.user.limit - 1
        switch test.base {
        case .consuming: #expect(machine.consumer == .consuming && machine.inFlight == 1)
        case .full: #expect(machine.inFlight == test.user.limit && world.parked != nil)
        case .held: #expect(machine.isHeld && machine.consumer == .idle && machine.inFlight == straggler && world.timers.count == 1)
        case .probing: #expect(machine.probeTaking && machine.inFlight == straggler)
        case .probeSent: #expect(world.jobs == [false, true])
        case .paused: #expect(machine.paused && machine.consumer == .idle)
        case .heldPaused: #expect(machine.paused && machine.isHeld)
        case .heldAlongside: #expect(machine.isHeld && world.alerts == 0 && machine.consumer == .idle)
        case .draining: #expect(machine.lifecycle != .running && world.timers.count == 1 && machine.inFlight == 1)
        case .drainingHeld: #expect(machine.isHeld && machine.lifecycle != .running)
        case .consumerFailed: #expect(machine.consumer == .idle && machine.brokerFailing && world.brokerAlerts == 1 && machine.inFlight == 1)
        case .probeFailed: #expect(machine.isHeld && !machine.probeTaking && machine.brokerFailing && world.brokerAlerts == 1)
        }
    }

    /// Every ordered pair of the user's events, from every base state (pause while held,
    /// shutdown while probing, hold while draining, a probe's answer after a resume, a sibling's
    /// hold while probing, ...): generated, not picked. After each pair the world lets what is
    /// under way finish and checks where the machine came to rest: a shut-down consumer has
    /// finished once; a paused one neither consumes nor probes; a flowing one consumes; a held
    /// one probes when the interval passes.
    @Test(arguments: Case.all)
    func everyPairOfEventsLeavesAConsumerThatCouldRun(_ test: Case) {
        for first in test.user.stimuli {
            for second in test.user.stimuli {
                var world = test.base.world(test.user)
                world.apply(first)
                world.apply(second)
                world.quiesce()
                Self.expectAtRest(&world)
                #expect(world.violations.isEmpty, "\(test.base) then \(first), \(second): \(world.violations)")
            }
        }
    }

    /// Triples from the hold states: every event after every pair.
    @Test(arguments: Case.holds)
    func everyTripleFromAHoldLeavesAConsumerThatCouldRun(_ test: Case) {
        let stimuli = test.user.stimuli
        for first in stimuli {
            for second in stimuli {
                for third in stimuli {
                    var world = test.base.world(test.user)
                    world.apply(first)
                    world.apply(second)
                    world.apply(third)
                    world.quiesce()
                    Self.expectAtRest(&world)
                    #expect(world.violations.isEmpty, "\(test.base) then \(first), \(second), \(third): \(world.violations)")
                }
            }
        }
    }

    /// Where a quiet consumer must be, whatever happened before.
    static func expectAtRest(_ world: inout ConsumerWorld) {
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
            } else if world.consumer == .none && machine.consumeRetryAt != nil {
                // A consume failed: started again once the interval passed, never given up.
                world.apply(.timePasses)
                world.quiesce()
                if world.consumer != .live { world.violation("a failed consumer was not started again after the interval") }
            } else if world.consumer != .live {
                world.violation("flowing but not consuming")
            }
        }
    }

    // MARK: - The hold, as told to an operator

    @Test(arguments: User.allCases)
    func theFirstHeldVerdictAlertsOnceAndLaterOnesStaySilent(_ user: User) {
        var world = ConsumerWorld(user)
        for step: Stimulus in [.consumerConfirms, .deliver, .deliver, .answerHeld] { world.apply(step) }
        #expect(world.machine.isHeld)
        #expect(world.consumer == .cancelling)
        world.apply(.answerHeld)
        #expect(world.alerts == 1)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test func probesComeOnlyAtTheIntervalOneAtATimeUntilOneSucceeds() {
        var world = Base.held.world(.bundle)
        world.apply(.endUnsent)  // the straggler
        var machine = world.machine
        let t0 = world.now
        #expect(machine.tick(now: t0.advanced(by: .seconds(4))) == .none)
        #expect(machine.tick(now: t0.advanced(by: .seconds(5))).control == .probe)
        #expect(machine.tick(now: t0.advanced(by: .seconds(6))) == .none, "one probe at a time")
        #expect(machine.probeTaken(.found(publishedAt: nil), now: t0.advanced(by: .seconds(6))).intake == .start)
        let (settlement, stillHeld) = machine.answered(.hold(reason: "BadCertificate", status: 403), endsAHold: true, now: t0.advanced(by: .seconds(6)))
        #expect(settlement == .settle)
        #expect(stillHeld == ConsumerWorld.Machine.Action(timer: t0.advanced(by: .seconds(11))), "no new alert, the next probe")
        #expect(machine.settled(probe: true, now: t0.advanced(by: .seconds(6))) == .none)
        #expect(machine.tick(now: t0.advanced(by: .seconds(10))) == .none)
        #expect(machine.tick(now: t0.advanced(by: .seconds(11))).control == .probe)
        _ = machine.probeTaken(.found(publishedAt: nil), now: t0.advanced(by: .seconds(11)))
        let (_, resumed) = machine.answered(.healthy, endsAHold: true, now: t0.advanced(by: .seconds(12)))
        #expect(resumed == ConsumerWorld.Machine.Action(control: .startConsumer, news: .resumed(heldFor: .seconds(12))))
        #expect(!machine.isHeld)
    }

    /// A job sent before the hold that APNs then accepts says nothing of the fault that holds (a
    /// topic the key lacks): it does not end the hold, whether a probe is out or not; only the
    /// probe's success does. (It did: a bundle with one refused topic held and resumed at every
    /// answer of another topic, 24 alerts a second, handing back every job it had each time.)
    @Test func aHealthyAnswerOfAJobSentBeforeTheHoldDoesNotEndIt() {
        let world = Base.held.world(.bundle)
        var machine = world.machine
        let t0 = world.now
        let (settlement, action) = machine.answered(.healthy, endsAHold: false, now: t0)
        #expect(settlement == .settle && action == .none && machine.isHeld)
        #expect(machine.settled(probe: false, now: t0) == .none)
        #expect(machine.tick(now: t0.advanced(by: .seconds(5))).control == .probe)
        #expect(machine.probeTaken(.found(publishedAt: nil), now: t0.advanced(by: .seconds(5))).intake == .start)
        // Another straggler's success while the probe is out: still held.
        #expect(machine.answered(.healthy, endsAHold: false, now: t0.advanced(by: .seconds(6))).1 == .none)
        #expect(machine.isHeld)
        let (_, resumed) = machine.answered(.healthy, endsAHold: true, now: t0.advanced(by: .seconds(7)))
        #expect(resumed == ConsumerWorld.Machine.Action(control: .startConsumer, news: .resumed(heldFor: .seconds(7))))
        #expect(!machine.isHeld)
    }

    @Test(arguments: [User.registrations, .groups])
    func aPingThatFailsProbesAgainAtTheIntervalAndOneThatSucceedsResumes(_ user: User) {
        var world = Base.held.world(user)
        world.quiesce()
        var machine = world.machine
        let t0 = world.now
        #expect(machine.tick(now: t0.advanced(by: .seconds(5))).control == .probe)
        let failed = machine.probeTaken(.nothing, now: t0.advanced(by: .seconds(6)))
        #expect(failed.intake == nil && failed.action == .init(timer: t0.advanced(by: .seconds(11))))
        #expect(machine.tick(now: t0.advanced(by: .seconds(11))).control == .probe)
        let (intake, resumed) = machine.probeTaken(.healthy, now: t0.advanced(by: .seconds(12)))
        #expect(intake == nil)
        #expect(resumed == .init(control: .startConsumer, news: .resumed(heldFor: .seconds(12))))
    }

    @Test func aSiblingsHoldStopsTheConsumerWithoutAnAlertAndItsOwnProbeResumesIt() {
        var world = Base.consuming.world(.registrations)
        world.apply(.siblingHolds)
        #expect(world.machine.isHeld && world.alerts == 0 && world.consumer == .cancelling)
        world.apply(.siblingHolds)
        world.quiesce()
        world.apply(.timePasses)
        #expect(world.probeOut)
        world.apply(.probeHealthy)
        #expect(!world.machine.isHeld && world.consumer == .starting)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test func anEmptyQueueOrAProbeThatEndsUnsentReschedulesTheProbe() {
        var world = Base.probing.world(.bundle)
        world.apply(.endUnsent)
        let t0 = world.now
        var machine = world.machine
        #expect(machine.probeTaken(.nothing, now: t0).action == .init(timer: t0.advanced(by: .seconds(5))))
        #expect(machine.tick(now: t0.advanced(by: .seconds(5))).control == .probe)
        // A malformed job as the probe says nothing of the credentials: held, probe again later.
        #expect(machine.probeTaken(.found(publishedAt: nil), now: t0.advanced(by: .seconds(5))).intake == .start)
        #expect(machine.settled(probe: true, now: t0.advanced(by: .seconds(6))) == .init(timer: t0.advanced(by: .seconds(11))))
        #expect(machine.isHeld)
    }

    // MARK: - Outages of the broker

    /// A consume the broker refused, or a consumer whose deliveries ended with an error (the
    /// connection lost and the consumer not restored), ends nothing: the consumer is started
    /// again after the interval, however often it fails, with one line for the outage and one
    /// for its end. (It used to end `run()`, and with it the bundle's unit.)
    @Test(arguments: User.allCases)
    func aConsumerThatFailsIsStartedAgainAfterTheIntervalAndTheOutageToldOnce(_ user: User) {
        var world = Base.consumerFailed.world(user)
        let failedAt = world.now
        #expect(world.timers == [failedAt.advanced(by: ConsumerWorld.probeInterval)])
        #expect(world.machine.tick(now: failedAt.advanced(by: .seconds(1))) == .none, "not before the interval")
        world.apply(.timePasses)
        #expect(world.consumer == .starting)
        for _ in 0..<3 {
            world.apply(.consumerFails)
            #expect(world.consumer == .none)
            world.apply(.timePasses)
            #expect(world.consumer == .starting, "tried again, never given up")
        }
        #expect(world.brokerAlerts == 1, "one line for the outage, not one per try")
        world.apply(.consumerConfirms)
        #expect(!world.brokerOutage, "its end told")
        world.apply(.answerHealthy)
        #expect(world.jobs.isEmpty && world.consumer == .live)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    /// A held consumer's probe that throws (no connection) proves nothing: the next probe comes
    /// an interval later, and the hold and the outage are each told once.
    @Test(arguments: User.allCases)
    func aProbeThatFailsIsTakenAgainAtTheIntervalAndTheOutageToldOnce(_ user: User) {
        var world = Base.probeFailed.world(user)
        #expect(world.machine.isHeld && world.alerts == 1 && world.brokerAlerts == 1)
        for _ in 0..<3 {
            world.apply(.timePasses)
            #expect(world.probeOut)
            world.apply(.probeFails)
        }
        #expect(world.brokerAlerts == 1)
        world.apply(.timePasses)
        world.apply(user.probeTakesAJob ? .probeFinds : .probeHealthy)
        if user.probeTakesAJob {
            #expect(!world.brokerOutage, "the broker answered")
            // Jobs taken before the hold answer first and end nothing; the probe's answer ends it.
            for _ in world.jobs where world.machine.isHeld { world.apply(.answerHealthy) }
        }
        #expect(!world.machine.isHeld && world.consumer == .starting)
        world.apply(.consumerConfirms)
        #expect(!world.brokerOutage, "its end told, by the probe or the consumer started after it")
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    /// A failed consume during a shutdown lets the consumer finish: no retry after `finish`.
    @Test func aConsumerThatFailsWhileDrainingFinishesOnceItsJobsEnd() {
        var world = Base.consuming.world(.bundle)
        world.apply(.shutdown)
        world.apply(.consumerFails)
        #expect(world.finishes == 0 && world.consumer == .none)
        world.apply(.answerHealthy)
        #expect(world.finishes == 1)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    /// At the deadline the jobs still out are counted for the shell, which hands them back
    /// (closes their channel) instead of leaving them unacked until the connection ends.
    @Test(arguments: User.allCases)
    func theJobsAbandonedAtTheDeadlineAreCountedForTheShell(_ user: User) {
        var world = Base.draining.world(user)
        #expect(world.machine.abandoned == 0)
        world.apply(.deadlinePasses)
        #expect(world.finishes == 1)
        #expect(world.machine.abandoned == 1)
        var clean = Base.consuming.world(user)
        clean.apply(.shutdown)
        clean.quiesce()
        #expect(clean.finishes == 1 && clean.machine.abandoned == 0, "nothing abandoned: the channel is kept for the next consumer")
    }

    // MARK: - Overlaps that went wrong before the machine

    @Test func aShutdownWhileProbingSendsNothingMoreAndFinishesOnceTheGetReturns() {
        var world = Base.probing.world(.bundle)
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
        var world = Base.held.world(.bundle)
        world.apply(.pause)
        world.apply(.timePasses)
        #expect(!world.probeOut)
        world.apply(.resume)
        #expect(world.probeOut, "the interval has passed: probe at once")
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test(arguments: User.allCases)
    func aHoldWhileDrainingAlertsButStartsNothing(_ user: User) {
        var world = ConsumerWorld(user)
        for step: Stimulus in [.consumerConfirms, .deliver, .shutdown, .consumerEnds, .answerHeld] { world.apply(step) }
        #expect(world.alerts == 1)
        #expect(world.consumer == .none && !world.probeOut && world.timers.count == 1)
        #expect(world.finishes == 1)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test(arguments: User.allCases)
    func atTheShutdownDeadlineJobsAreAbandonedAndTheirLateAnswersDropped(_ user: User) {
        var world = Base.draining.world(user)
        world.apply(.timePasses)
        #expect(world.finishes == 0)
        world.apply(.deadlinePasses)
        #expect(world.finishes == 1)
        var machine = world.machine
        #expect(machine.answered(.healthy, endsAHold: false, now: world.now).0 == .drop)
        #expect(machine.inFlight == 0)
    }

    @Test func aDeliveryOverTheBoundWaitsForRoomAndIsSentBackOnAPause() throws {
        var world = Base.full.world(.bundle)
        let parked = try #require(world.parked)
        var machine = world.machine
        #expect(machine.settled(probe: false, now: world.now).wake == .init(waiter: parked, admitted: true))
        #expect(machine.inFlight == 2, "the settled job left, the waiting one came in")
        world.apply(.pause)
        #expect(world.parked == nil && world.nacked == 1)
        #expect(world.violations.isEmpty, "\(world.violations)")
    }

    @Test func theNewestPublishTimeIsKept() {
        var world = Base.consuming.world(.bundle)
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(world.machine.lastTakenPublishedAt == nil)
        _ = world.machine.delivered(publishedAt: t0)
        _ = world.machine.settled(probe: false, now: world.now)
        _ = world.machine.delivered(publishedAt: t0.addingTimeInterval(-600))  // an old job back from a retry queue
        #expect(world.machine.lastTakenPublishedAt == t0)
    }

    // MARK: - The window

    @Test func aLargerWindowRaisesTheBoundAndReconsumesAConsumingConsumer() {
        var machine = ConsumerWorld.Machine(limit: 500, probeInterval: .seconds(5), shutdownDeadline: .seconds(30))
        let now = ContinuousClock.now
        #expect(machine.start(now: now).control == .startConsumer)
        _ = machine.consumerStarted()
        let action = machine.resize(to: 1000)
        #expect(action.control == .reconsume)
        #expect(machine.limit == 1000)
        #expect(machine.consumer == .consuming, "the consumer is replaced, not ended")
    }

    @Test func aWindowThatWaversKeepsTheConsumer() {
        var machine = ConsumerWorld.Machine(limit: 1000, probeInterval: .seconds(5), shutdownDeadline: .seconds(30))
        _ = machine.start(now: ContinuousClock.now)
        _ = machine.consumerStarted()
        // Smaller, but above a quarter: the bound and the prefetch stay.
        for wanted in [999, 700, 251, 1000] {
            #expect(machine.resize(to: wanted) == .none)
            #expect(machine.limit == 1000)
        }
        // A quarter: the prefetch follows down.
        #expect(machine.resize(to: 250).control == .reconsume)
        #expect(machine.limit == 250)
        // Nonsense is at least one job.
        #expect(machine.resize(to: -5).control == .reconsume)
        #expect(machine.limit == 1)
    }

    /// A smaller share of the budget (bundles added while running) is a bound, not a wish: it
    /// is followed past the hysteresis; a larger forced value is no reason to re-consume.
    @Test func aForcedSmallerBoundIsFollowedAtOnce() {
        var machine = ConsumerWorld.Machine(limit: 400, probeInterval: .seconds(5), shutdownDeadline: .seconds(30))
        _ = machine.start(now: ContinuousClock.now)
        _ = machine.consumerStarted()
        #expect(machine.resize(to: 300) == .none)
        #expect(machine.resize(to: 300, force: true).control == .reconsume)
        #expect(machine.limit == 300)
        #expect(machine.resize(to: 300, force: true) == .none)
        #expect(machine.resize(to: 1200, force: true).control == .reconsume, "growth past the bound as without force")
        #expect(machine.limit == 1200)
    }

    @Test func aWindowChangeWhileHeldOrPausedWaitsForTheNextConsumer() {
        var world = Base.held.world(.bundle)
        #expect(world.machine.resize(to: 64).control == .none)
        #expect(world.machine.limit == 64, "the next consumer starts with it")
        var paused = Base.paused.world(.bundle)
        #expect(paused.machine.resize(to: 64).control == .none)
        var starting = ConsumerWorld.Machine(limit: 2, probeInterval: .seconds(5), shutdownDeadline: .seconds(30))
        _ = starting.start(now: ContinuousClock.now)
        #expect(starting.resize(to: 64).control == .none, "basic.consume under way: the shell compares when it answers")
    }

    @Test func aLargerWindowAdmitsTheDeliveryWaitingForRoom() throws {
        var world = Base.full.world(.bundle)
        let parked = try #require(world.parked)
        let action = world.machine.resize(to: 8)
        #expect(action.wake == .init(waiter: parked, admitted: true))
        #expect(action.control == .reconsume)
        #expect(world.machine.inFlight == 3)
    }
}
