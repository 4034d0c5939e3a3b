import Foundation

@testable import QueueConsumer

/// The world around a `ConsumerStateMachine`, as a user's shell and the broker would make it,
/// in plain values: it carries out each action the machine returns (a consumer that starts, a
/// probe out, timers, jobs in flight, a parked delivery) and records every action that could
/// not be carried out in a real consumer as a violation: a second consumer, a cancel with no
/// consumer, a probe while consuming, a job started while held, paused or draining, a second
/// alert, a second finish, a count that disagrees with the world's.
struct ConsumerWorld {
    typealias Machine = ConsumerStateMachine<Int, ContinuousClock.Instant>

    /// The machine's users, each with the configuration it runs with (bounds made small so a
    /// few deliveries reach them).
    enum User: String, CaseIterable, Sendable {
        /// A bundle's pipeline: probes by taking one job (`basic.get`), paused by operators.
        case bundle
        /// `apns.registry`: probes by pinging PostgreSQL, held along with its sibling.
        case registrations
        /// `apns.groups`: as the registrations, with a bound of one.
        case groups

        var limit: Int { self == .groups ? 1 : 2 }
        var probeTakesAJob: Bool { self == .bundle }
        var pausable: Bool { self == .bundle }
        var hasSibling: Bool { self != .bundle }
        /// A bundle's transport sizes its in-flight window; the registry's do not.
        var windowed: Bool { self == .bundle }

        /// Whether `stimulus` can happen to this user at all.
        func allows(_ stimulus: Stimulus) -> Bool {
            switch stimulus {
            case .probeFinds: probeTakesAJob
            case .probeHealthy, .siblingHolds: hasSibling
            case .pause, .resume: pausable
            case .windowGrows, .windowShrinks: windowed
            default: true
            }
        }

        var stimuli: [Stimulus] { Stimulus.allCases.filter(allows) }
    }

    enum ConsumerState: Equatable {
        case none, starting, live, cancelling
    }

    /// What can happen to a consumer from outside the machine, one step each. A step that
    /// cannot happen in the world's state (an answer with no job in flight) does nothing.
    enum Stimulus: String, CaseIterable, Sendable {
        case deliver, answerHealthy, answerHeld, endUnsent
        case pause, resume, shutdown
        case consumerConfirms, consumerEnds
        case probeFinds, probeEmpty, probeHealthy
        /// The broker lost: a `basic.consume` refused or a consumer's deliveries ended with an
        /// error (cancelled by the broker, not restored after a reconnect); a probe that threw.
        case consumerFails, probeFails
        case siblingHolds
        case timePasses, deadlinePasses
        /// The transport's window: four times the bound, or a quarter of it.
        case windowGrows, windowShrinks
    }

    static let probeInterval = Duration.seconds(5)
    static let shutdownDeadline = Duration.seconds(30)

    let user: User
    var machine: Machine
    var now = ContinuousClock.now
    var consumer = ConsumerState.none
    var probeOut = false
    /// Jobs in flight, oldest first; true for a probe.
    var jobs: [Bool] = []
    var parked: Int?
    var nextWaiter = 0
    var timers: [ContinuousClock.Instant] = []
    var finishes = 0
    var alertOpen = false
    /// Held along with a sibling: no alert of its own.
    var heldAlongside = false
    var alerts = 0
    /// A broker outage was told and its end not yet.
    var brokerOutage = false
    var brokerAlerts = 0
    var nacked = 0
    /// Consumers replaced by a larger or smaller prefetch.
    var reconsumes = 0
    /// The largest bound so far: jobs taken under it stay in flight after a shrink.
    var highestLimit = 0
    var violations: [String] = []
    var log: [String] = []

    init(_ user: User) {
        self.user = user
        machine = Machine(limit: user.limit, probeInterval: Self.probeInterval, shutdownDeadline: Self.shutdownDeadline)
        highestLimit = user.limit
        carryOut(machine.start(now: now), "start")
    }

    mutating func violation(_ text: String) {
        violations.append("\(user): \(text) after \(log.joined(separator: " → "))")
    }

    mutating func carryOut(_ action: Machine.Action, _ step: String) {
        log.append(step)
        if let wake = action.wake {
            if parked != wake.waiter { violation("woke waiter \(wake.waiter), parked \(String(describing: parked))") }
            parked = nil
            if wake.admitted { started(probe: false) } else { nacked += 1 }
        }
        switch action.control {
        case .none:
            break
        case .startConsumer:
            if consumer != .none { violation("a second consumer") }
            consumer = .starting
        case .cancelConsumer:
            if consumer != .live { violation("cancel with the consumer \(consumer)") }
            consumer = .cancelling
        case .reconsume:
            // A new consumer replaces the live one; the machine sees no start or end.
            if consumer != .live { violation("re-consume with the consumer \(consumer)") }
            reconsumes += 1
        case .probe:
            if consumer != .none || probeOut || machine.paused || machine.lifecycle != .running {
                violation("a probe with consumer \(consumer), probe out \(probeOut), paused \(machine.paused), \(machine.lifecycle)")
            }
            probeOut = true
        case .finish:
            finishes += 1
            if finishes > 1 { violation("a second finish") }
            if consumer != .none { violation("finished with the consumer \(consumer)") }
            if case .abandoned = action.news {} else if !jobs.isEmpty { violation("finished with \(jobs.count) jobs out, none abandoned") }
        }
        if let timer = action.timer { timers.append(timer) }
        switch action.news {
        case .held:
            if alertOpen || heldAlongside { violation("a second alert in one hold") }
            alertOpen = true
            alerts += 1
        case .resumed:
            if !alertOpen && !heldAlongside { violation("resumed with no hold") }
            alertOpen = false
            heldAlongside = false
        case .brokerFailed:
            if brokerOutage { violation("a second broker alert in one outage") }
            brokerOutage = true
            brokerAlerts += 1
        case .brokerRecovered:
            if !brokerOutage { violation("broker recovered with no outage told") }
            brokerOutage = false
        case .none, .abandoned:
            break
        }
        checkInvariants()
    }

    mutating func checkInvariants() {
        if machine.inFlight != jobs.count {
            violation("machine counts \(machine.inFlight) in flight, the world \(jobs.count)")
        }
        highestLimit = max(highestLimit, machine.limit)
        if machine.inFlight > highestLimit { violation("\(machine.inFlight) in flight over the limit") }
        let expected: Machine.Consumer
        switch consumer {
        case .none: expected = .idle
        case .starting: expected = .starting
        case .live: expected = .consuming
        case .cancelling: expected = .cancelling
        }
        if machine.consumer != expected { violation("machine's consumer \(machine.consumer), the world's \(consumer)") }
        if machine.isHeld != (alertOpen || heldAlongside) {
            violation("held \(machine.isHeld) but alert open \(alertOpen), held alongside \(heldAlongside)")
        }
        if machine.probeTaking != probeOut { violation("probe taking \(machine.probeTaking), out \(probeOut)") }
        if machine.brokerFailing != brokerOutage { violation("machine's broker failing \(machine.brokerFailing), outage told \(brokerOutage)") }
        if machine.hasRoomWaiter != (parked != nil) { violation("machine has a waiter \(machine.hasRoomWaiter), parked \(String(describing: parked))") }
    }

    private mutating func started(probe: Bool) {
        jobs.append(probe)
        if !probe && (machine.paused || machine.isHeld || machine.lifecycle != .running) {
            violation("a job started while paused \(machine.paused), held \(machine.isHeld), \(machine.lifecycle)")
        }
    }

    /// One step; returns whether it could happen.
    @discardableResult
    mutating func apply(_ stimulus: Stimulus) -> Bool {
        guard user.allows(stimulus) else { return false }
        let step = stimulus.rawValue
        switch stimulus {
        case .deliver:
            guard consumer == .live || consumer == .cancelling, parked == nil else { return false }
            switch machine.delivered(publishedAt: nil) {
            case .start: started(probe: false)
            case .refuse: nacked += 1
            case .waitForRoom:
                nextWaiter += 1
                switch machine.parkForRoom(nextWaiter) {
                case .start?: started(probe: false)
                case .refuse?: nacked += 1
                case .waitForRoom?: violation("told to wait again")
                case nil: parked = nextWaiter
                }
            }
            log.append(step)
            checkInvariants()
        case .answerHealthy, .answerHeld:
            guard !jobs.isEmpty else { return false }
            let signal: BreakerSignal = stimulus == .answerHealthy ? .healthy : .hold(reason: "BadCertificate", status: 403)
            let (settlement, action) = machine.answered(signal, endsAHold: user.probeTakesAJob ? jobs.first ?? false : true, now: now)
            if settlement == .drop {
                jobs.removeFirst()
                if machine.lifecycle != .finished { violation("dropped an answer while \(machine.lifecycle)") }
            }
            carryOut(action, step)
            if settlement == .settle { settle(step) }
        case .endUnsent:
            guard !jobs.isEmpty else { return false }
            settle(step)
        case .pause, .resume:
            let (changed, action) = machine.setPaused(stimulus == .pause, now: now)
            guard changed else { return false }
            carryOut(action, step)
        case .shutdown:
            carryOut(machine.shutdown(now: now), step)
        case .siblingHolds:
            if !machine.isHeld { heldAlongside = true }
            carryOut(machine.holdAlongside(reason: "registry unavailable", now: now), step)
        case .consumerConfirms:
            guard consumer == .starting else { return false }
            consumer = .live
            carryOut(machine.consumerStarted(), step)
        case .consumerEnds:
            // A parked delivery holds the consumer's task: its sequence cannot end meanwhile.
            guard consumer == .live || consumer == .cancelling, parked == nil else { return false }
            consumer = .none
            carryOut(machine.consumerEnded(now: now), step)
        case .probeFinds, .probeEmpty, .probeHealthy:
            guard probeOut else { return false }
            probeOut = false
            let result: Machine.ProbeResult =
                switch stimulus {
                case .probeFinds: .found(publishedAt: nil)
                case .probeHealthy: .healthy
                default: .nothing
                }
            let (intake, action) = machine.probeTaken(result, now: now)
            if intake == .start { started(probe: true) } else if intake == .refuse { nacked += 1 }
            if stimulus != .probeFinds, intake != nil { violation("a probe that took no job gave \(String(describing: intake))") }
            carryOut(action, step)
        case .consumerFails:
            // A parked delivery holds the consumer's task: its sequence cannot end meanwhile.
            guard consumer != .none, consumer == .starting || parked == nil else { return false }
            consumer = .none
            carryOut(machine.consumerFailed(reason: "connection lost", now: now), step)
        case .probeFails:
            guard probeOut else { return false }
            probeOut = false
            carryOut(machine.probeFailed(reason: "not connected", now: now), step)
        case .windowGrows:
            carryOut(machine.resize(to: machine.limit * 4), step)
        case .windowShrinks:
            guard machine.limit >= 4 else { return false }
            carryOut(machine.resize(to: machine.limit / 4), step)
        case .timePasses:
            passTime(Self.probeInterval, step)
        case .deadlinePasses:
            passTime(Self.shutdownDeadline, step)
        }
        return true
    }

    private mutating func settle(_ step: String) {
        let probe = jobs.removeFirst()
        carryOut(machine.settled(probe: probe, now: now), step)
    }

    private mutating func passTime(_ duration: Duration, _ step: String) {
        now = now.advanced(by: duration)
        let due = timers.filter { $0 <= now }
        timers.removeAll { $0 <= now }
        if due.isEmpty { log.append(step) }
        for _ in due { carryOut(machine.tick(now: now), step) }
    }

    /// Lets everything under way finish without new breaker signals: the consumer's start or cancel
    /// completes, a probe proves nothing, jobs in flight end unsent.
    mutating func quiesce() {
        for _ in 0..<50 {
            if consumer == .starting {
                apply(.consumerConfirms)
            } else if consumer == .cancelling {
                apply(.consumerEnds)
            } else if probeOut {
                apply(.probeEmpty)
            } else if !jobs.isEmpty {
                apply(.endUnsent)
            } else {
                return
            }
        }
        violation("never quiet")
    }
}
