import Foundation
import Synchronization

/// What the fleet needs from one bundle's pipeline, kept apart from the pipeline's own logic:
/// the operator's pause (contract §5: a paused bundle takes no jobs on any instance) and the
/// publish time of the newest job taken (the queue latency estimate, `QueueLatency`).
///
/// A pause must stop a consumer that is waiting for its next delivery, so the pipeline
/// registers a callback for the moment it is paused; resuming needs none, the pipeline's loop
/// sees the flag.
public final class BundleFleetState: Sendable {
    private struct State {
        var paused = false
        var watchers: [Int: @Sendable () -> Void] = [:]
        var nextWatcher = 0
        var lastTakenPublishedAt: Date?
    }

    private let state = Mutex(State())

    public init() {}

    public var isPaused: Bool { state.withLock { $0.paused } }

    /// Sets the pause; returns whether it changed. Watchers run (outside the lock) when the
    /// bundle becomes paused.
    @discardableResult
    public func setPaused(_ paused: Bool) -> Bool {
        let (changed, watchers) = state.withLock { state -> (Bool, [@Sendable () -> Void]) in
            guard state.paused != paused else { return (false, []) }
            state.paused = paused
            return (true, paused ? Array(state.watchers.values) : [])
        }
        for watcher in watchers { watcher() }
        return changed
    }

    /// Runs `action` each time the bundle becomes paused, until `removeWatcher` with the result.
    func whenPaused(_ action: @escaping @Sendable () -> Void) -> Int {
        state.withLock { state in
            state.nextWatcher += 1
            state.watchers[state.nextWatcher] = action
            return state.nextWatcher
        }
    }

    func removeWatcher(_ id: Int) {
        _ = state.withLock { $0.watchers.removeValue(forKey: id) }
    }

    /// A job was taken from the work queue; `publishedAt` is its AMQP timestamp, if any.
    func taken(publishedAt: Date?) {
        guard let publishedAt else { return }
        state.withLock { state in
            if publishedAt > (state.lastTakenPublishedAt ?? .distantPast) { state.lastTakenPublishedAt = publishedAt }
        }
    }

    public var lastTakenPublishedAt: Date? { state.withLock { $0.lastTakenPublishedAt } }
}
