/// The hold breaker, the one in the code base (contract §4's held bundle, §6's registry
/// unavailable): a fault holds (one loud line), while held a probe is due every `probeInterval`
/// and one probe at a time is out, and the first success ends the hold (one line). A value with
/// no clock of its own: every event is given the time.
///
/// Its users: `ConsumerStateMachine` (the bundle pipeline and the registry and group consumers,
/// whose probe is a `basic.get` or a ping of PostgreSQL) and `TrailingPusher`, which is no queue
/// consumer: its every poll of PostgreSQL is its probe, so it tells the breaker of faults and
/// successes and asks no probe schedule of it.
package struct HoldBreaker<Instant: InstantProtocol & Sendable>: Hashable, Sendable where Instant.Duration == Duration {
    package enum State: Hashable, Sendable {
        case flowing
        /// A fault holds; the next probe is due at `nextProbe`.
        case held(reason: String, since: Instant, nextProbe: Instant)
        /// One probe is out.
        case probing(reason: String, since: Instant)
    }

    /// What a caller may do about probing now.
    package enum ProbeDue: Hashable, Sendable {
        /// Not held: nothing to probe.
        case flowing
        /// Probe now; the breaker counts the probe as out.
        case probe
        /// Held; the next probe is due at this time.
        case wait(until: Instant)
        /// A probe is out already.
        case probing
    }

    package let probeInterval: Duration
    package private(set) var state: State = .flowing

    package init(probeInterval: Duration) {
        self.probeInterval = probeInterval
    }

    package var isHeld: Bool { state != .flowing }
    package var isProbing: Bool {
        if case .probing = state { return true }
        return false
    }

    /// A fault (a held outcome, the registry failing, a probe that failed). Returns true when
    /// it starts a hold: the one moment to alert. A fault while held keeps the probe schedule;
    /// a failed probe schedules the next one an interval from now.
    package mutating func fault(_ reason: String, now: @autoclosure () -> Instant) -> Bool {
        switch state {
        case .flowing:
            let now = now()
            state = .held(reason: reason, since: now, nextProbe: now.advanced(by: probeInterval))
            return true
        case .held(_, let since, let next):
            state = .held(reason: reason, since: since, nextProbe: next)
            return false
        case .probing(_, let since):
            state = .held(reason: reason, since: since, nextProbe: now().advanced(by: probeInterval))
            return false
        }
    }

    /// A success: returns how long the hold lasted when it ends one, nil when not held.
    package mutating func succeeded(now: @autoclosure () -> Instant) -> Duration? {
        switch state {
        case .flowing:
            return nil
        case .held(_, let since, _), .probing(_, let since):
            state = .flowing
            return since.duration(to: now())
        }
    }

    /// Whether to probe now; `.probe` counts the probe as out until `inconclusive`, `fault` or `succeeded`.
    package mutating func probeDue(now: Instant) -> ProbeDue {
        switch state {
        case .flowing:
            return .flowing
        case .probing:
            return .probing
        case .held(let reason, let since, let next):
            guard now >= next else { return .wait(until: next) }
            state = .probing(reason: reason, since: since)
            return .probe
        }
    }

    /// The probe out proved nothing (an empty queue, a job that ended unsent): held still, the
    /// next probe an interval from now. Returns whether a probe was out.
    @discardableResult
    package mutating func inconclusive(now: @autoclosure () -> Instant) -> Bool {
        guard case .probing(let reason, let since) = state else { return false }
        state = .held(reason: reason, since: since, nextProbe: now().advanced(by: probeInterval))
        return true
    }
}
