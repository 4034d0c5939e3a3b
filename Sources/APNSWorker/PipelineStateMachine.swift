import Foundation

/// The whole state of one bundle's pipeline as a value, with no IO and no clock of its own
/// (in the manner of postgres-nio's `PoolStateMachine`): events go in as mutating calls, each
/// given the time when it needs one, and what the pipeline must do comes out as values that
/// `BundlePipeline` carries out. Every combination of events is therefore testable without a
/// socket, a task or a real clock (`PipelineStateMachineTests`).
///
/// Four questions are answered here and nowhere else:
/// - **may a delivery start?** Only while running, consuming, not paused by an operator, not
///   held by a provider fault, and under the in-flight bound (`limit`, the prefetch);
/// - **the hold breaker** (contract §4): the first `held` outcome holds the bundle (one loud
///   line), the consumer is cancelled, and one job at a time is taken with `basic.get` as a
///   probe every `probeInterval` until an outcome that is not held ends the hold (one line);
/// - **the consumer's life**: started and cancelled only when the machine says so, so a pause, a
///   hold and a shutdown that overlap cannot start two or cancel none;
/// - **draining**: after a graceful shutdown no job starts; once the consumer has ended, jobs
///   in flight get `shutdownDeadline`; those still out then are abandoned to the broker (their
///   late answers settle nothing; unacked, they are delivered again: at-least-once).
///
/// `Waiter` is what a delivery over the in-flight bound waits on (a continuation in production,
/// a number in tests); only a broker that ignores the prefetch makes one wait.
struct PipelineStateMachine<Waiter> {
    typealias Instant = ContinuousClock.Instant

    /// The hold breaker.
    enum Breaker: Hashable, Sendable {
        case flowing
        /// A provider fault holds the bundle; the next probe is due at `nextProbe`.
        case held(reason: String, since: Instant, nextProbe: Instant)
        /// One job is out as a probe: being taken (`basic.get`) or sent.
        case probing(reason: String, since: Instant)
    }

    /// The broker consumer, as far as the pipeline knows.
    enum Consumer: Hashable, Sendable {
        case idle
        /// `basic.consume` asked for, not answered yet.
        case starting
        case consuming
        /// `basic.cancel` asked for; deliveries still arriving are sent back.
        case cancelling
    }

    enum Lifecycle: Hashable, Sendable {
        /// Made, `run()` not called yet.
        case created
        case running
        /// Graceful shutdown: no new job; `deadline` is set once the consumer has ended.
        case draining(deadline: Instant?)
        /// `run()` returns (or has returned). Answers that still come settle nothing.
        case finished
    }

    /// What becomes of one delivery.
    enum Intake: Hashable, Sendable {
        /// Counted in flight: compose and send it.
        case compose
        /// Not to be started (held, paused, draining, consumer cancelled): nack it with requeue.
        case refuse
        /// Over the in-flight bound: wait (`parkForRoom`) until a job settles.
        case waitForRoom
    }

    /// What becomes of an answered job.
    enum Settlement: Hashable, Sendable {
        case settle
        /// The shutdown deadline passed: leave the job unacked for the broker to deliver again.
        case drop
    }

    /// What only the pipeline's control loop can do (it awaits the broker).
    enum Control: Hashable, Sendable {
        case none
        case startConsumer
        case cancelConsumer
        /// Take one job with `basic.get` and report it with `probeTaken`.
        case probe
        /// `run()` is done.
        case finish
    }

    /// What the operator is told (one line each, not one per job) and the gauges.
    enum News: Hashable, Sendable {
        case none
        case held(reason: String, status: Int)
        case resumed(heldFor: Duration)
        case abandoned(jobs: Int)
    }

    /// A waiting delivery to resume: `admitted` true when it was counted in flight.
    struct Wake {
        var waiter: Waiter
        var admitted: Bool
    }

    /// The side effects of one event; the fields are independent and carried out together.
    struct Action {
        var wake: Wake?
        var control: Control = .none
        /// Tell the machine `tick(now:)` at this time (a probe or the shutdown deadline is due).
        var timer: Instant?
        var news: News = .none

        static var none: Action { Action() }
        /// Whether the control loop has anything to do.
        var needsControl: Bool { control != .none || timer != nil }

        /// Takes the fields `other` sets (two rules of one event never set the same field).
        mutating func add(_ other: Action) {
            if let wake = other.wake { self.wake = wake }
            if other.control != .none { control = other.control }
            if let timer = other.timer { self.timer = timer }
            if other.news != .none { news = other.news }
        }
    }

    let limit: Int
    let probeInterval: Duration
    let shutdownDeadline: Duration

    private(set) var breaker: Breaker = .flowing
    private(set) var consumer: Consumer = .idle
    private(set) var lifecycle: Lifecycle = .created
    /// An operator's fleet-wide pause (contract §5): no consuming, no probing.
    private(set) var paused = false
    /// Jobs composed and not yet settled (or dropped).
    private(set) var inFlight = 0
    /// A probe's `basic.get` is under way.
    private(set) var probeTaking = false
    private var roomWaiter: Waiter?
    /// The publish time of the newest job taken (the fleet's queue latency estimate).
    private(set) var lastTakenPublishedAt: Date?

    init(limit: Int, probeInterval: Duration, shutdownDeadline: Duration) {
        self.limit = max(limit, 1)
        self.probeInterval = probeInterval
        self.shutdownDeadline = shutdownDeadline
    }

    var isHeld: Bool { breaker != .flowing }
    var hasRoomWaiter: Bool { roomWaiter != nil }

    /// New jobs may start from the consumer.
    private var accepting: Bool { lifecycle == .running && !paused && breaker == .flowing && consumer == .consuming }
    /// The consumer should exist.
    private var wantsConsumer: Bool { lifecycle == .running && !paused && breaker == .flowing }
    private var isDraining: Bool {
        if case .draining = lifecycle { return true }
        return false
    }

    // MARK: - The control loop's events

    /// `run()` begins.
    mutating func start(now: Instant) -> Action {
        switch lifecycle {
        case .created:
            lifecycle = .running
            return takeAgain(now: now)
        case .draining:
            return drain(now: now)
        case .running, .finished:
            return .none
        }
    }

    /// Graceful shutdown: start no job, end the consumer, give jobs in flight their deadline.
    mutating func shutdown(now: Instant) -> Action {
        switch lifecycle {
        case .created, .running:
            lifecycle = .draining(deadline: nil)
            var action = stopTaking()
            action.add(drain(now: now))
            return action
        case .draining, .finished:
            return .none
        }
    }

    /// An operator paused or resumed the bundle; `changed` is false when it already was so.
    mutating func setPaused(_ paused: Bool, now: Instant) -> (changed: Bool, action: Action) {
        guard self.paused != paused else { return (false, .none) }
        self.paused = paused
        return (true, paused ? stopTaking() : takeAgain(now: now))
    }

    /// `basic.consume` answered.
    mutating func consumerStarted() -> Action {
        guard consumer == .starting else { return .none }
        if wantsConsumer {
            consumer = .consuming
            return .none
        }
        consumer = .cancelling
        return Action(control: .cancelConsumer)
    }

    /// The consumer's deliveries ended (cancelled by us or by the broker).
    mutating func consumerEnded(now: Instant) -> Action {
        consumer = .idle
        var action = Action()
        if let waiter = roomWaiter {
            roomWaiter = nil
            action.wake = Wake(waiter: waiter, admitted: false)
        }
        action.add(isDraining ? drain(now: now) : takeAgain(now: now))
        return action
    }

    /// A timer set by an earlier action went off (a stale one changes nothing).
    mutating func tick(now: Instant) -> Action {
        switch lifecycle {
        case .draining(let deadline?) where now >= deadline:
            lifecycle = .finished
            return Action(control: .finish, news: .abandoned(jobs: inFlight))
        case .running:
            guard case .held(_, _, let next) = breaker, now >= next else { return .none }
            return takeAgain(now: now)
        default:
            return .none
        }
    }

    /// The probe's `basic.get` returned (`found`: a job); `.compose` counts it in flight.
    mutating func probeTaken(found: Bool, publishedAt: Date?, now: Instant) -> (intake: Intake?, action: Action) {
        probeTaking = false
        if case .probing(let reason, let since) = breaker {
            if found, lifecycle == .running, !paused {
                inFlight += 1
                taken(publishedAt: publishedAt)
                return (.compose, .none)
            }
            // The queue was empty, or the bundle was paused or shut down meanwhile: probe later.
            breaker = .held(reason: reason, since: since, nextProbe: now.advanced(by: probeInterval))
        }
        // (A job in flight before the hold may have answered meanwhile and moved the breaker:
        // the job taken is then no probe any more and goes back.)
        return (found ? .refuse : nil, isDraining ? drain(now: now) : takeAgain(now: now))
    }

    // MARK: - A job's events (any thread)

    /// A delivery from the consumer.
    mutating func delivered(publishedAt: Date?) -> Intake {
        guard accepting else { return .refuse }
        taken(publishedAt: publishedAt)
        guard inFlight < limit else { return .waitForRoom }
        inFlight += 1
        return .compose
    }

    /// A delivery told `.waitForRoom` waits here; nil: parked until a `Wake`.
    mutating func parkForRoom(_ waiter: Waiter) -> Intake? {
        guard accepting else { return .refuse }
        guard inFlight < limit else {
            roomWaiter = waiter
            return nil
        }
        inFlight += 1
        return .compose
    }

    /// The parked delivery's task was cancelled: the waiter to resume, unadmitted, if still parked.
    mutating func cancelRoomWait() -> Waiter? {
        defer { roomWaiter = nil }
        return roomWaiter
    }

    /// APNs answered a job; `breaker` is what its outcome says of the provider's credentials.
    /// `now` is read only when the breaker changes.
    mutating func answered(_ effect: OutcomeRouter.BreakerEffect, now: @autoclosure () -> Instant) -> (Settlement, Action) {
        guard lifecycle != .finished else {
            inFlight -= 1
            return (.drop, .none)
        }
        switch (effect, breaker) {
        case (.healthy, .flowing):
            return (.settle, .none)
        case (.hold(let reason, let status), .flowing):
            let now = now()
            breaker = .held(reason: reason, since: now, nextProbe: now.advanced(by: probeInterval))
            var action = stopTaking()
            action.add(takeAgain(now: now))
            action.news = .held(reason: reason, status: status)
            return (.settle, action)
        case (.hold(let reason, _), .held(_, let since, let next)):
            // Jobs already in flight when the hold began finish as held too: no new alert.
            breaker = .held(reason: reason, since: since, nextProbe: next)
            return (.settle, .none)
        case (.hold(let reason, _), .probing(_, let since)):
            let now = now()
            breaker = .held(reason: reason, since: since, nextProbe: now.advanced(by: probeInterval))
            return (.settle, takeAgain(now: now))
        case (.healthy, .held(_, let since, _)), (.healthy, .probing(_, let since)):
            let now = now()
            breaker = .flowing
            var action = takeAgain(now: now)
            action.news = .resumed(heldFor: since.duration(to: now))
            return (.settle, action)
        }
    }

    /// A job reached its end and was settled (or sent back). `probe`: it was a held bundle's
    /// probe; one that ended without an answer from APNs (malformed, gated, poison) proved
    /// nothing, so the bundle stays held and probes again after the interval.
    mutating func settled(probe: Bool, now: @autoclosure () -> Instant) -> Action {
        inFlight -= 1
        var action = Action()
        if probe, case .probing(let reason, let since) = breaker {
            let now = now()
            breaker = .held(reason: reason, since: since, nextProbe: now.advanced(by: probeInterval))
            action = takeAgain(now: now)
        }
        if let waiter = roomWaiter, inFlight < limit {
            roomWaiter = nil
            let admitted = accepting
            if admitted { inFlight += 1 }
            action.wake = Wake(waiter: waiter, admitted: admitted)
        }
        if isDraining { action.add(drain(now: now())) }
        return action
    }

    // MARK: - Rules

    private mutating func taken(publishedAt: Date?) {
        guard let publishedAt else { return }
        if publishedAt > (lastTakenPublishedAt ?? .distantPast) { lastTakenPublishedAt = publishedAt }
    }

    /// Held, paused or draining: take nothing more from the consumer.
    private mutating func stopTaking() -> Action {
        var action = Action()
        if let waiter = roomWaiter {
            roomWaiter = nil
            action.wake = Wake(waiter: waiter, admitted: false)
        }
        if consumer == .consuming {
            consumer = .cancelling
            action.control = .cancelConsumer
        }
        // `.starting`: `consumerStarted` cancels it.
        return action
    }

    /// Running and not paused: consume when flowing, probe when held and due. Nothing while the
    /// consumer still ends or a probe's `basic.get` is out (their ends call this again).
    private mutating func takeAgain(now: Instant) -> Action {
        guard lifecycle == .running, !paused, consumer == .idle, !probeTaking else { return .none }
        switch breaker {
        case .flowing:
            consumer = .starting
            return Action(control: .startConsumer)
        case .held(let reason, let since, let next):
            guard now >= next else { return Action(timer: next) }
            breaker = .probing(reason: reason, since: since)
            probeTaking = true
            return Action(control: .probe)
        case .probing:
            return .none
        }
    }

    /// Draining: finish once nothing is out; else, once the consumer and any probe's `get` have
    /// ended, start the shutdown deadline.
    private mutating func drain(now: Instant) -> Action {
        guard case .draining(let deadline) = lifecycle, consumer == .idle, !probeTaking else { return .none }
        if inFlight == 0 {
            lifecycle = .finished
            return Action(control: .finish)
        }
        guard deadline == nil else { return .none }
        let due = now.advanced(by: shutdownDeadline)
        lifecycle = .draining(deadline: due)
        return Action(timer: due)
    }
}

extension PipelineStateMachine.Wake: Equatable where Waiter: Equatable {}
extension PipelineStateMachine.Action: Equatable where Waiter: Equatable {}
extension PipelineStateMachine.Wake: Sendable where Waiter: Sendable {}
extension PipelineStateMachine.Action: Sendable where Waiter: Sendable {}
extension PipelineStateMachine: Sendable where Waiter: Sendable {}
