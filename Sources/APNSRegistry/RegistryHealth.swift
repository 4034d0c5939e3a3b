import Foundation
import Synchronization

/// Whether the registry is usable, shared by the registration and group consumers (contract §6:
/// the registry down is a held fault). Pure state machine: events return what to do, the
/// consumers log and act. The first failure holds both consumers with one loud error; while
/// held, one probe per `probeInterval`; the first probe that succeeds resumes them.
public struct RegistryHoldState: Sendable, Hashable {
    public enum FailureAction: Sendable, Hashable {
        /// First failure: pause the consumers and log one loud error.
        case holdAndAlert
        /// Already held: nothing new to say.
        case none
    }
    public enum ProbeDecision: Sendable, Hashable {
        case probe, wait
    }

    public let probeInterval: Duration
    public private(set) var heldSince: ContinuousClock.Instant?
    private var lastProbe: ContinuousClock.Instant?

    public init(probeInterval: Duration) {
        self.probeInterval = probeInterval
    }

    public var isHeld: Bool { heldSince != nil }

    public mutating func failed(now: ContinuousClock.Instant) -> FailureAction {
        guard heldSince == nil else { return .none }
        heldSince = now
        lastProbe = now
        return .holdAndAlert
    }

    /// Whether a probe is due now; a due probe is taken by the caller that asked.
    public mutating func probeDue(now: ContinuousClock.Instant) -> ProbeDecision {
        guard heldSince != nil else { return .wait }
        if let lastProbe, lastProbe.duration(to: now) < probeInterval { return .wait }
        lastProbe = now
        return .probe
    }

    /// A probe or an operation succeeded: returns how long the hold lasted when it ends one.
    public mutating func succeeded(now: ContinuousClock.Instant) -> Duration? {
        guard let since = heldSince else { return nil }
        heldSince = nil
        lastProbe = nil
        return since.duration(to: now)
    }
}

/// `RegistryHoldState` shared between tasks.
public final class RegistryHealth: Sendable {
    private let state: Mutex<RegistryHoldState>

    public init(probeInterval: Duration) {
        state = Mutex(RegistryHoldState(probeInterval: probeInterval))
    }

    public var isHeld: Bool { state.withLock { $0.isHeld } }
    func failed() -> RegistryHoldState.FailureAction { state.withLock { $0.failed(now: .now) } }
    func probeDue() -> RegistryHoldState.ProbeDecision { state.withLock { $0.probeDue(now: .now) } }
    func succeeded() -> Duration? { state.withLock { $0.succeeded(now: .now) } }
}
