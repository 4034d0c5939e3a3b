import APNSCore

/// The circuit breaker of the `held` outcome (contract §4), as a pure state machine.
///
/// A provider fault (bad JWT, bad certificate, disallowed topic) would fail every job of the
/// bundle the same way, so the first one pauses the bundle's consumer: jobs stay in the broker.
/// While held, the driver asks `probeDue(now:)` and, when told to, sends one job as a probe;
/// the probe's outcome either resumes the bundle or schedules the next probe. One loud log line
/// at the start of a hold and one at its end, never one per job.
public struct HoldBreaker: Sendable {
    public enum State: Sendable, Hashable {
        case flowing
        case held(reason: String, since: ContinuousClock.Instant, nextProbe: ContinuousClock.Instant)
        case probing(reason: String, since: ContinuousClock.Instant)
    }

    public enum Action: Sendable, Hashable {
        /// Stop taking jobs and log, once, that the bundle is held and why.
        case pauseAndAlert(reason: String)
        /// Take one job and send it as a probe.
        case sendProbe
        /// The provider fault is gone: log it and take jobs again.
        case resume(heldFor: Duration)
        case none
    }

    public private(set) var state: State = .flowing
    public let probeInterval: Duration

    public init(probeInterval: Duration = .seconds(5)) {
        self.probeInterval = probeInterval
    }

    public var isHeld: Bool {
        if case .flowing = state { return false }
        return true
    }

    /// A job ended `held`.
    public mutating func heldOutcome(reason: String, now: ContinuousClock.Instant) -> Action {
        switch state {
        case .flowing:
            state = .held(reason: reason, since: now, nextProbe: now.advanced(by: probeInterval))
            return .pauseAndAlert(reason: reason)
        case .held(_, let since, let next):
            // Jobs already in flight when the hold began finish as held too: no new alert.
            state = .held(reason: reason, since: since, nextProbe: next)
            return .none
        case .probing(_, let since):
            state = .held(reason: reason, since: since, nextProbe: now.advanced(by: probeInterval))
            return .none
        }
    }

    /// A job ended in any outcome other than held: the provider is fine.
    public mutating func healthyOutcome(now: ContinuousClock.Instant) -> Action {
        switch state {
        case .flowing:
            return .none
        case .held(_, let since, _), .probing(_, let since):
            state = .flowing
            return .resume(heldFor: since.duration(to: now))
        }
    }

    /// Called periodically while held.
    public mutating func probeDue(now: ContinuousClock.Instant) -> Action {
        guard case .held(let reason, let since, let next) = state, now >= next else { return .none }
        state = .probing(reason: reason, since: since)
        return .sendProbe
    }

    /// The probe found no job to send (the queue is empty): try again later.
    public mutating func probeFoundNothing(now: ContinuousClock.Instant) {
        guard case .probing(let reason, let since) = state else { return }
        state = .held(reason: reason, since: since, nextProbe: now.advanced(by: probeInterval))
    }
}
