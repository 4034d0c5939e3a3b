import CancellableWait
import Synchronization

/// A stop told to one loop alone, distinct from cancellation: a periodic loop given one
/// (`Periodic.run(…, until:)`) ends at it between two rounds, like at graceful shutdown, and
/// never in the middle of a round. Cancellation is the parent's "stop now" and cuts a round
/// short; a stop is "stop when you can", for one child of a task group that goes on (a feedback
/// poller whose bundle a reload removed). Once stopped, stopped for good.
public final class StopSignal: Sendable {
    private struct State {
        var stopped = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    public init() {}

    public var isStopped: Bool { state.withLock { $0.stopped } }

    /// Stops; every wait for it returns.
    public func stop() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard !state.stopped else { return [] }
            state.stopped = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns when stopped, or when the waiting task is cancelled.
    public func stopped() async {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        await withCancellableWait(
            register: { continuation -> Void? in
                state.withLock { state in
                    if state.stopped { return () }
                    state.waiters[id] = continuation
                    return nil
                }
            },
            withdraw: { [self] in state.withLock { $0.waiters.removeValue(forKey: id) } },
            cancelled: ())
    }

    /// Runs `operation`, cancelled when the stop comes first (as `cancelWhenGracefulShutdown`
    /// does at graceful shutdown).
    public func cancelling<T: Sendable>(_ operation: @Sendable @escaping () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                await self.stopped()
                return nil
            }
            defer { group.cancelAll() }
            while let first = try await group.next() {
                if let value = first { return value }
                // Stopped: the operation is cancelled and answers for itself.
                group.cancelAll()
            }
            throw CancellationError()
        }
    }
}
