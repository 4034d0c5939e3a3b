import CancellableWait
import ServiceLifecycle
import Synchronization

/// Holds a transport's connections back until a notification first needs them.
///
/// A bundle keeps a transport for each environment because a job may ask for the one that is not
/// its bundle's default (tokens of debug builds). Most bundles never get such a job. Connecting
/// that transport at start-up would double the connections every instance keeps to Apple. For a
/// binary bundle it would also keep retrying a sandbox gateway that Apple retired.
///
/// Once open, the gate stays open for the life of the process: after one such job the transport
/// is kept up like any other, so a binary bundle that got one retries its gateway from then on.
final class FirstUseGate: Sendable {
    private enum State {
        case closed(waiters: [UInt64: CheckedContinuation<Void, any Error>], nextID: UInt64)
        case open
    }

    private let state: Mutex<State>
    /// Mirrors `state == .open`, so that the sends after the first skip the lock.
    private let opened: Atomic<Bool>

    /// - Parameter open: true for a transport that connects at start-up.
    init(open: Bool) {
        state = Mutex(open ? .open : .closed(waiters: [:], nextID: 0))
        opened = Atomic(open)
    }

    var isOpen: Bool { opened.load(ordering: .acquiring) }

    /// Tasks waiting right now (for tests: to know the waiters are registered).
    var waiterCount: Int {
        state.withLock { if case .closed(let waiters, _) = $0 { return waiters.count } else { return 0 } }
    }

    /// Lets every waiter through, now and later. Called by each send, so it must stay cheap.
    func open() {
        guard !opened.load(ordering: .acquiring) else { return }
        let waiters = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            guard case .closed(let waiters, _) = state else { return [] }
            state = .open
            opened.store(true, ordering: .releasing)
            return Array(waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// For a transport's connection loop: true once the gate is open (at once if it already is),
    /// false if the task is cancelled or graceful shutdown begins first.
    func waitUntilOpenOrShutdown() async -> Bool {
        if isOpen { return true }
        do {
            try await cancelWhenGracefulShutdown { try await self.waitUntilOpen() }
            return true
        } catch {
            return false
        }
    }

    /// Returns once the gate is open; throws `CancellationError` if the task is cancelled first.
    func waitUntilOpen() async throws {
        let id = state.withLock { state -> UInt64? in
            guard case .closed(let waiters, let nextID) = state else { return nil }
            state = .closed(waiters: waiters, nextID: nextID + 1)
            return nextID
        }
        guard let id else { return }
        try await withCancellableWait(
            register: { continuation -> Result<Void, any Error>? in
                state.withLock { state in
                    guard case .closed(var waiters, let nextID) = state else { return .success(()) }
                    waiters[id] = continuation
                    state = .closed(waiters: waiters, nextID: nextID)
                    return nil
                }
            },
            withdraw: { [self] in
                state.withLock { state -> CheckedContinuation<Void, any Error>? in
                    guard case .closed(var waiters, let nextID) = state, let waiter = waiters.removeValue(forKey: id) else { return nil }
                    state = .closed(waiters: waiters, nextID: nextID)
                    return waiter
                }
            })
    }
}
