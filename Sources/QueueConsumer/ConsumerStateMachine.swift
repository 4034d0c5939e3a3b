import Foundation

/// The whole state of one queue's consumer as a value, with no IO and no clock of its own (in
/// the manner of postgres-nio's `PoolStateMachine`): events go in as mutating calls, each given
/// the time when it needs one, and what the consumer must do comes out as values that
/// `QueueConsumer` carries out. Every combination of events is therefore testable without a
/// socket, a task or a real clock (`ConsumerStateMachineTests`, with each user's configuration).
///
/// Its users: every bundle's pipeline (`BundlePipeline`, probe: one job by `basic.get`), the
/// registry's `apns.registry` and `apns.groups` consumers (`RegistryConsumer`, probe: a ping of
/// PostgreSQL). Four questions are answered here and nowhere else:
/// - **may a delivery start?** Only while running, consuming, not paused by an operator, not
///   held by a fault, and under the in-flight bound (`limit`, the prefetch);
/// - **the hold** (`HoldBreaker`; contract §4 and §6): the first fault holds the consumer (one
///   loud line), the consumer is cancelled, and a probe is taken every `probeInterval` until a
///   success ends the hold (one line);
/// - **the consumer's life**: started and cancelled only when the machine says so, so a pause, a
///   hold and a shutdown that overlap cannot start two or cancel none;
/// - **outages**: a consume or a probe that fails (the broker lost, a consumer it cancelled or
///   could not restore) ends nothing: the consumer is tried again after `probeInterval`, the
///   outage told once and its end once (`consumerFailed`, `probeFailed`);
/// - **draining**: after a graceful shutdown no job starts; once the consumer has ended, jobs
///   in flight get `shutdownDeadline`; those still out then are abandoned, handed back to the
///   broker at once (`abandoned`: the shell closes their channel; their late answers settle
///   nothing; they are delivered again: at-least-once).
///
/// `Waiter` is what a delivery over the in-flight bound waits on (a continuation in production,
/// a number in tests); only a broker that ignores the prefetch makes one wait. `Instant` is the
/// injected clock's (`ConsumerClock`).
package struct ConsumerStateMachine<Waiter, Instant: InstantProtocol & Sendable> where Instant.Duration == Duration {
    package typealias Breaker = HoldBreaker<Instant>

    /// The broker consumer, as far as the machine knows.
    package enum Consumer: Hashable, Sendable {
        case idle
        /// `basic.consume` asked for, not answered yet.
        case starting
        case consuming
        /// `basic.cancel` asked for; deliveries still arriving are sent back.
        case cancelling
    }

    package enum Lifecycle: Hashable, Sendable {
        /// Made, `run()` not called yet.
        case created
        case running
        /// Graceful shutdown: no new job; `deadline` is set once the consumer has ended.
        case draining(deadline: Instant?)
        /// `run()` returns (or has returned). Answers that still come settle nothing.
        case finished
    }

    /// Whether the consumer starts one delivery's work: the consumer's bookkeeping, not how a
    /// job ends (a bundle's job ends in a `JobEnd`, decided by its work).
    package enum Intake: Hashable, Sendable {
        /// Counted in flight: do its work.
        case start
        /// Not to be started (held, paused, draining, consumer cancelled): nack it with requeue.
        case refuse
        /// Over the in-flight bound: wait (`parkForRoom`) until a job settles.
        case waitForRoom
    }

    /// What a probe found.
    package enum ProbeResult: Hashable, Sendable {
        /// A job, taken to be worked as the probe; its answer decides (`basic.get`).
        case found(publishedAt: Date?)
        /// Nothing proven (an empty queue, a ping that failed): held still, probe again later.
        case nothing
        /// The probe itself proved the fault gone (a ping that succeeded).
        case healthy
    }

    /// Whether an answered delivery may still be settled by its work: the consumer's
    /// bookkeeping, not how a job ends (a bundle's job ends in a `JobEnd`, decided by its work).
    package enum Settlement: Hashable, Sendable {
        /// Settle it as the work decided (ack, publish then ack, reject).
        case settle
        /// The shutdown deadline passed: leave the job unacked for the broker to deliver again.
        case drop
    }

    /// What only the consumer's control loop can do (it awaits the broker).
    package enum Control: Hashable, Sendable {
        case none
        case startConsumer
        case cancelConsumer
        /// Consume again with the prefetch `limit` now says, then cancel the consumer before: the
        /// broker applies `basic.qos` only to consumers started after it.
        case reconsume
        /// Take a probe and report it with `probeTaken`.
        case probe
        /// `run()` is done.
        case finish
    }

    /// What the operator is told (one line each, not one per job) and the gauges.
    package enum News: Hashable, Sendable {
        case none
        case held(reason: String, status: Int)
        case resumed(heldFor: Duration)
        case abandoned(jobs: Int)
        /// The broker failed a consume or a probe: tried again every `probeInterval` (told once).
        case brokerFailed(reason: String)
        /// A consume or a probe went through again after `brokerFailed`.
        case brokerRecovered
    }

    /// A waiting delivery to resume: `admitted` true when it was counted in flight.
    package struct Wake {
        package var waiter: Waiter
        package var admitted: Bool
    }

    /// The side effects of one event; the fields are independent and carried out together.
    package struct Action {
        package var wake: Wake?
        package var control: Control = .none
        /// Tell the machine `tick(now:)` at this time (a probe or the shutdown deadline is due).
        package var timer: Instant?
        package var news: News = .none

        package init(wake: Wake? = nil, control: Control = .none, timer: Instant? = nil, news: News = .none) {
            self.wake = wake
            self.control = control
            self.timer = timer
            self.news = news
        }

        package static var none: Action { Action() }
        /// Whether the control loop has anything to do.
        package var needsControl: Bool { control != .none || timer != nil }

        /// Takes the fields `other` sets (two rules of one event never set the same field).
        mutating func add(_ other: Action) {
            if let wake = other.wake { self.wake = wake }
            if other.control != .none { control = other.control }
            if let timer = other.timer { self.timer = timer }
            if other.news != .none { news = other.news }
        }
    }

    /// The in-flight bound, and the prefetch the consumer is started with.
    package private(set) var limit: Int
    package let shutdownDeadline: Duration

    package private(set) var breaker: Breaker
    package private(set) var consumer: Consumer = .idle
    package private(set) var lifecycle: Lifecycle = .created
    /// An operator's fleet-wide pause (contract §5): no consuming, no probing.
    package private(set) var paused = false
    /// Jobs started and not yet settled (or dropped): the one in-flight count of the consumer.
    package private(set) var inFlight = 0
    /// A probe (`basic.get`, a ping) is under way.
    package private(set) var probeTaking = false
    private var roomWaiter: Waiter?
    /// The publish time of the newest job taken (the fleet's queue latency estimate).
    package private(set) var lastTakenPublishedAt: Date?
    /// A consume failed: the next is started no sooner than this.
    package private(set) var consumeRetryAt: Instant?
    /// A consume or probe failed and none has gone through since (its news was told).
    package private(set) var brokerFailing = false
    /// Jobs still out when the shutdown deadline finished the consumer: their deliveries are
    /// to be handed back (the shell closes the consumer's channel), not left unacked.
    package private(set) var abandoned = 0

    package init(limit: Int, probeInterval: Duration, shutdownDeadline: Duration) {
        self.limit = max(limit, 1)
        self.breaker = Breaker(probeInterval: probeInterval)
        self.shutdownDeadline = shutdownDeadline
    }

    package var probeInterval: Duration { breaker.probeInterval }
    package var isHeld: Bool { breaker.isHeld }
    package var hasRoomWaiter: Bool { roomWaiter != nil }

    /// New jobs may start from the consumer.
    private var accepting: Bool { lifecycle == .running && !paused && !breaker.isHeld && consumer == .consuming }
    private var isDraining: Bool {
        if case .draining = lifecycle { return true }
        return false
    }

    // MARK: - The control loop's events

    /// `run()` begins.
    package mutating func start(now: Instant) -> Action {
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
    package mutating func shutdown(now: Instant) -> Action {
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

    /// An operator paused or resumed the consumer; `changed` is false when it already was so.
    package mutating func setPaused(_ paused: Bool, now: Instant) -> (changed: Bool, action: Action) {
        guard self.paused != paused else { return (false, .none) }
        self.paused = paused
        return (true, paused ? stopTaking() : takeAgain(now: now))
    }

    /// The fault that holds a sibling holds this consumer too (the registry's two consumers
    /// share PostgreSQL): held without news of its own; its own probes end the hold.
    package mutating func holdAlongside(reason: String, now: Instant) -> Action {
        guard !breaker.isHeld, breaker.fault(reason, now: now) else { return .none }
        var action = stopTaking()
        action.add(takeAgain(now: now))
        return action
    }

    /// `basic.consume` answered.
    package mutating func consumerStarted() -> Action {
        guard consumer == .starting else { return .none }
        let news = brokerWorks()
        if lifecycle == .running && !paused && !breaker.isHeld {
            consumer = .consuming
            return Action(news: news)
        }
        consumer = .cancelling
        return Action(control: .cancelConsumer, news: news)
    }

    /// `basic.consume` failed, or the consumer's deliveries ended with an error (the broker
    /// cancelled it, or it could not be started again after a reconnect): an outage, never the
    /// consumer's end. The consumer is started again after `probeInterval` (a held one probes
    /// instead, on its own schedule); the first failure of an outage is news.
    package mutating func consumerFailed(reason: String, now: Instant) -> Action {
        var action = Action(news: brokerFails(reason))
        guard consumer != .idle else { return action }
        consumer = .idle
        consumeRetryAt = now.advanced(by: probeInterval)
        if let waiter = roomWaiter {
            roomWaiter = nil
            action.wake = Wake(waiter: waiter, admitted: false)
        }
        action.add(isDraining ? drain(now: now) : takeAgain(now: now))
        return action
    }

    /// The probe itself failed (the broker lost): nothing proven, the next probe an interval
    /// from now; the first failure of an outage is news.
    package mutating func probeFailed(reason: String, now: Instant) -> Action {
        probeTaking = false
        breaker.inconclusive(now: now)
        var action = isDraining ? drain(now: now) : takeAgain(now: now)
        action.news = brokerFails(reason)
        return action
    }

    /// The consumer's deliveries ended (cancelled by us or by the broker).
    package mutating func consumerEnded(now: Instant) -> Action {
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
    package mutating func tick(now: Instant) -> Action {
        switch lifecycle {
        case .draining(let deadline?) where now >= deadline:
            lifecycle = .finished
            abandoned = inFlight
            return Action(control: .finish, news: .abandoned(jobs: inFlight))
        case .running:
            if case .held(_, _, let next) = breaker.state, now >= next { return takeAgain(now: now) }
            if !breaker.isHeld, let retry = consumeRetryAt, now >= retry { return takeAgain(now: now) }
            return .none
        default:
            return .none
        }
    }

    /// The probe returned; `.start` counts the job it found in flight, `.refuse` sends it back.
    package mutating func probeTaken(_ result: ProbeResult, now: Instant) -> (intake: Intake?, action: Action) {
        probeTaking = false
        let answered = probeAnswered(result, now: now)
        var action = answered.action
        // The broker answered. With news of its own (the hold ended), the outage's end is told
        // by the consumer that starts next.
        if action.news == .none { action.news = brokerWorks() }
        return (answered.intake, action)
    }

    private mutating func probeAnswered(_ result: ProbeResult, now: Instant) -> (intake: Intake?, action: Action) {
        let found: Bool
        switch result {
        case .found(let publishedAt):
            found = true
            if breaker.isProbing, lifecycle == .running, !paused {
                inFlight += 1
                taken(publishedAt: publishedAt)
                return (.start, .none)
            }
        case .healthy:
            if breaker.isProbing, let heldFor = breaker.succeeded(now: now) {
                var action = isDraining ? drain(now: now) : takeAgain(now: now)
                action.news = .resumed(heldFor: heldFor)
                return (nil, action)
            }
            found = false
        case .nothing:
            found = false
        }
        // Nothing proven, or paused or shut down meanwhile: probe later. (A job in flight before
        // the hold may have answered meanwhile and moved the breaker: a job taken is then no
        // probe any more and goes back.)
        breaker.inconclusive(now: now)
        return (found ? .refuse : nil, isDraining ? drain(now: now) : takeAgain(now: now))
    }

    /// The work wants `wanted` jobs in flight (its transport's window). The bound
    /// follows, and a running consumer is started again with it as its prefetch, only when the
    /// window grew past the bound or fell to a quarter of it: a window that wavers does not
    /// churn consumers, and one that shrank a little keeps the jobs it has. `force`: a bound,
    /// not a wish (a smaller share of the budget after bundles were added): followed at once.
    package mutating func resize(to wanted: Int, force: Bool = false) -> Action {
        let wanted = max(wanted, 1)
        guard wanted > limit || wanted * 4 <= limit || (force && wanted < limit) else { return .none }
        let grew = wanted > limit
        limit = wanted
        var action = Action()
        if grew, let waiter = roomWaiter, inFlight < limit {
            roomWaiter = nil
            let admitted = accepting
            if admitted { inFlight += 1 }
            action.wake = Wake(waiter: waiter, admitted: admitted)
        }
        if consumer == .consuming { action.control = .reconsume }
        return action
    }

    // MARK: - A job's events (any thread)

    /// A delivery from the consumer.
    package mutating func delivered(publishedAt: Date?) -> Intake {
        guard accepting else { return .refuse }
        taken(publishedAt: publishedAt)
        guard inFlight < limit else { return .waitForRoom }
        inFlight += 1
        return .start
    }

    /// A delivery told `.waitForRoom` waits here; nil: parked until a `Wake`.
    package mutating func parkForRoom(_ waiter: Waiter) -> Intake? {
        guard accepting else { return .refuse }
        // One delivery waits at a time: a second one comes only while a re-consume's old and
        // new consumers both read (`resize`). The broker bounded it by its consumer's prefetch,
        // so it starts over the bound rather than wait in a slot that is taken.
        guard inFlight < limit, roomWaiter == nil else {
            if roomWaiter != nil {
                inFlight += 1
                return .start
            }
            roomWaiter = waiter
            return nil
        }
        inFlight += 1
        return .start
    }

    /// The parked delivery's task was cancelled: the waiter to resume, unadmitted, if still parked.
    package mutating func cancelRoomWait() -> Waiter? {
        defer { roomWaiter = nil }
        return roomWaiter
    }

    /// A job's work was judged (`signal`). `endsAHold`: whether a healthy signal is proof the
    /// fault is gone. For a bundle only its probe's is: a job sent before the hold says nothing of
    /// the fault that holds (a topic or environment the key lacks), and ending the hold on its
    /// answer flapped the consumer, which handed back every job it had at each turn. For the
    /// registry any message handled is (PostgreSQL answered). `now` is read only when the breaker
    /// changes.
    package mutating func answered(_ signal: BreakerSignal, endsAHold: Bool, now: @autoclosure () -> Instant) -> (Settlement, Action) {
        guard lifecycle != .finished else {
            inFlight -= 1
            return (.drop, .none)
        }
        switch signal {
        case .hold(let reason, let status):
            let wasProbing = breaker.isProbing
            if breaker.fault(reason, now: now()) {
                let now = now()
                var action = stopTaking()
                action.add(takeAgain(now: now))
                action.news = .held(reason: reason, status: status)
                return (.settle, action)
            }
            // Jobs already in flight when the hold began end as held too: no new alert. A probe
            // that failed schedules the next one.
            return (.settle, wasProbing ? takeAgain(now: now()) : .none)
        case .healthy:
            guard breaker.isHeld, endsAHold else { return (.settle, .none) }
            let now = now()
            let heldFor = breaker.succeeded(now: now) ?? .zero
            var action = takeAgain(now: now)
            action.news = .resumed(heldFor: heldFor)
            return (.settle, action)
        }
    }

    /// A job reached its end and was settled (or sent back). `probe`: it was a held consumer's
    /// probe; one that ended without a signal (malformed, gated, poison) proved nothing, so the
    /// consumer stays held and probes again after the interval.
    package mutating func settled(probe: Bool, now: @autoclosure () -> Instant) -> Action {
        inFlight -= 1
        var action = Action()
        if probe, breaker.inconclusive(now: now()) {
            action = takeAgain(now: now())
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

    /// The broker failed a consume or probe: news only for the first failure of an outage.
    private mutating func brokerFails(_ reason: String) -> News {
        defer { brokerFailing = true }
        return brokerFailing ? .none : .brokerFailed(reason: reason)
    }

    /// A consume or probe went through: the end of an outage is news.
    private mutating func brokerWorks() -> News {
        defer { brokerFailing = false }
        return brokerFailing ? .brokerRecovered : .none
    }

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
    /// consumer still ends or a probe is out (their ends call this again).
    private mutating func takeAgain(now: Instant) -> Action {
        guard lifecycle == .running, !paused, consumer == .idle, !probeTaking else { return .none }
        switch breaker.probeDue(now: now) {
        case .flowing:
            if let retry = consumeRetryAt, now < retry { return Action(timer: retry) }
            consumeRetryAt = nil
            consumer = .starting
            return Action(control: .startConsumer)
        case .wait(let next):
            return Action(timer: next)
        case .probe:
            probeTaking = true
            return Action(control: .probe)
        case .probing:
            return .none
        }
    }

    /// Draining: finish once nothing is out; else, once the consumer and any probe have ended,
    /// start the shutdown deadline.
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

extension ConsumerStateMachine.Wake: Equatable where Waiter: Equatable {}
extension ConsumerStateMachine.Action: Equatable where Waiter: Equatable {}
extension ConsumerStateMachine.Wake: Sendable where Waiter: Sendable {}
extension ConsumerStateMachine.Action: Sendable where Waiter: Sendable {}
extension ConsumerStateMachine: Sendable where Waiter: Sendable {}

/// What the hold breaker learns from a job's answer: whether a fault that is not the job's
/// holds (or would hold) its consumer. For a bundle, `OutcomeRouter.decide` reads it from the
/// APNs outcome; for the registry, from whether PostgreSQL answered.
public enum BreakerSignal: Hashable, Sendable {
    /// The fault is not the job's: hold, or stay held (a bundle's credentials, the registry down).
    case hold(reason: String, status: Int)
    /// The work was judged on its merits: a hold ends.
    case healthy
}
