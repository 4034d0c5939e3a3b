@testable import APNSWorker

/// The world around a `PipelineStateMachine`, as the pipeline's shell and the broker would
/// make it, in plain values: it carries out each action the machine returns (a consumer that
/// starts, a `basic.get` out, timers, jobs in flight, a parked delivery) and records every
/// action that could not be carried out in a real pipeline as a violation: a second consumer,
/// a cancel with no consumer, a probe while consuming, a job composed while held, paused or
/// draining, a second alert, a second finish, a count that disagrees with the world's.
struct PipelineWorld {
    typealias Machine = PipelineStateMachine<Int>

    enum ConsumerState: Equatable {
        case none, starting, live, cancelling
    }

    /// What can happen to a pipeline from outside the machine, one step each. A step that
    /// cannot happen in the world's state (an answer with no job in flight) does nothing.
    enum Stimulus: String, CaseIterable, Sendable {
        case deliver, answerHealthy, answerHeld, endUnsent
        case pause, resume, shutdown
        case consumerConfirms, consumerEnds
        case probeFinds, probeEmpty
        case timePasses, deadlinePasses
    }

    static let probeInterval = Duration.seconds(5)
    static let shutdownDeadline = Duration.seconds(30)

    var machine = Machine(limit: 2, probeInterval: probeInterval, shutdownDeadline: shutdownDeadline)
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
    var alerts = 0
    var nacked = 0
    var violations: [String] = []
    var log: [String] = []

    init() {
        carryOut(machine.start(now: now), "start")
    }

    mutating func violation(_ text: String) {
        violations.append("\(text) after \(log.joined(separator: " → "))")
    }

    mutating func carryOut(_ action: Machine.Action, _ step: String) {
        log.append(step)
        if let wake = action.wake {
            if parked != wake.waiter { violation("woke waiter \(wake.waiter), parked \(String(describing: parked))") }
            parked = nil
            if wake.admitted { composed(probe: false) } else { nacked += 1 }
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
            if alertOpen { violation("a second alert in one hold") }
            alertOpen = true
            alerts += 1
        case .resumed:
            if !alertOpen { violation("resumed with no hold") }
            alertOpen = false
        case .none, .abandoned:
            break
        }
        checkInvariants()
    }

    mutating func checkInvariants() {
        if machine.inFlight != jobs.count {
            violation("machine counts \(machine.inFlight) in flight, the world \(jobs.count)")
        }
        if machine.inFlight > machine.limit { violation("\(machine.inFlight) in flight over the limit") }
        let expected: Machine.Consumer
        switch consumer {
        case .none: expected = .idle
        case .starting: expected = .starting
        case .live: expected = .consuming
        case .cancelling: expected = .cancelling
        }
        if machine.consumer != expected { violation("machine's consumer \(machine.consumer), the world's \(consumer)") }
        if machine.isHeld != alertOpen { violation("held \(machine.isHeld) but alert open \(alertOpen)") }
        if machine.probeTaking != probeOut { violation("probe taking \(machine.probeTaking), out \(probeOut)") }
        if machine.hasRoomWaiter != (parked != nil) { violation("machine has a waiter \(machine.hasRoomWaiter), parked \(String(describing: parked))") }
    }

    private mutating func composed(probe: Bool) {
        jobs.append(probe)
        if !probe && (machine.paused || machine.isHeld || machine.lifecycle != .running) {
            violation("a job composed while paused \(machine.paused), held \(machine.isHeld), \(machine.lifecycle)")
        }
    }

    /// One step; returns whether it could happen.
    @discardableResult
    mutating func apply(_ stimulus: Stimulus) -> Bool {
        let step = stimulus.rawValue
        switch stimulus {
        case .deliver:
            guard consumer == .live || consumer == .cancelling, parked == nil else { return false }
            switch machine.delivered(publishedAt: nil) {
            case .compose: composed(probe: false)
            case .refuse: nacked += 1
            case .waitForRoom:
                nextWaiter += 1
                switch machine.parkForRoom(nextWaiter) {
                case .compose?: composed(probe: false)
                case .refuse?: nacked += 1
                case .waitForRoom?: violation("told to wait again")
                case nil: parked = nextWaiter
                }
            }
            log.append(step)
            checkInvariants()
        case .answerHealthy, .answerHeld:
            guard !jobs.isEmpty else { return false }
            let effect: OutcomeRouter.BreakerEffect = stimulus == .answerHealthy ? .healthy : .hold(reason: "BadCertificate", status: 403)
            let (settlement, action) = machine.answered(effect, now: now)
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
        case .consumerConfirms:
            guard consumer == .starting else { return false }
            consumer = .live
            carryOut(machine.consumerStarted(), step)
        case .consumerEnds:
            // A parked delivery holds the consumer's task: its sequence cannot end meanwhile.
            guard consumer == .live || consumer == .cancelling, parked == nil else { return false }
            consumer = .none
            carryOut(machine.consumerEnded(now: now), step)
        case .probeFinds, .probeEmpty:
            guard probeOut else { return false }
            probeOut = false
            let (intake, action) = machine.probeTaken(found: stimulus == .probeFinds, publishedAt: nil, now: now)
            if intake == .compose { composed(probe: true) } else if intake == .refuse { nacked += 1 }
            if stimulus == .probeEmpty, intake != nil { violation("an empty probe gave \(String(describing: intake))") }
            carryOut(action, step)
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

    /// Lets everything under way finish without new news from APNs: the consumer's start or
    /// cancel completes, a probe finds the queue empty, jobs in flight end unsent.
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
