import CancellableWait
import Synchronization

/// The jobs one consume loop has started and not yet settled. Their answers arrive on the
/// transport's threads with no task per job, so this is what the loop waits on: for room under
/// its bound, and for the last job at shutdown. Once the shutdown deadline passes the loop
/// abandons them: an answer that comes later settles nothing, and the broker delivers the job
/// again (at-least-once).
final class InFlightJobs: Sendable {
    private struct State {
        var count = 0
        var waiter: (atMost: Int, continuation: CheckedContinuation<Bool, Never>)?
        var abandoned = false
    }

    private let state = Mutex(State())

    var count: Int { state.withLock { $0.count } }
    var isAbandoned: Bool { state.withLock { $0.abandoned } }

    func enter() { state.withLock { $0.count += 1 } }

    func leave() {
        let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            state.count -= 1
            guard let waiter = state.waiter, state.count <= waiter.atMost else { return nil }
            state.waiter = nil
            return waiter.continuation
        }
        waiter?.resume(returning: true)
    }

    /// Late answers settle nothing from now on.
    func abandon() { state.withLock { $0.abandoned = true } }

    /// Waits until at most `limit` jobs are in flight: true then, false when the task was
    /// cancelled first. One waiter at a time (the consume loop).
    func waitUntil(atMost limit: Int) async -> Bool {
        if state.withLock({ $0.count <= limit }) { return true }
        return await withCancellableWait(
            register: { continuation -> Bool? in
                state.withLock { state in
                    if state.count <= limit { return true }
                    state.waiter = (limit, continuation)
                    return nil
                }
            },
            withdraw: {
                state.withLock { state in
                    defer { state.waiter = nil }
                    return state.waiter?.continuation
                }
            },
            cancelled: false)
    }
}
