import CancellableWait
import Foundation
import ServiceClock
import Synchronization

/// A clock that moves only when the test says; sleepers wake when it passes their deadline.
public final class ManualClock: ConsumerClock {
    private struct State {
        var offset: Duration = .zero
        var sleepers: [UInt64: (deadline: Duration, continuation: CheckedContinuation<Void, any Error>)] = [:]
        var nextID: UInt64 = 0
    }

    private let origin = ContinuousClock.now
    private let wallOrigin = Date()
    private let state = Mutex(State())

    public init() {}

    public var now: ContinuousClock.Instant { origin.advanced(by: state.withLock { $0.offset }) }
    /// Moves with `now`, from the wall-clock time the clock was made.
    public var wallTime: Date {
        let offset = state.withLock { $0.offset }
        return wallOrigin.addingTimeInterval(Double(offset.components.seconds) + Double(offset.components.attoseconds) / 1e18)
    }

    /// Tasks asleep on this clock right now.
    public var sleepers: Int { state.withLock { $0.sleepers.count } }

    public func sleep(for duration: Duration) async throws {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        try await withCancellableWait(
            register: { continuation -> Result<Void, any Error>? in
                state.withLock { state in
                    guard duration > .zero else { return .success(()) }
                    state.sleepers[id] = (state.offset + duration, continuation)
                    return nil
                }
            },
            withdraw: { [self] in state.withLock { $0.sleepers.removeValue(forKey: id)?.continuation } })
    }

    public func advance(by duration: Duration) {
        let due = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.offset += duration
            let now = state.offset
            let due = state.sleepers.filter { $0.value.deadline <= now }
            for id in due.keys { state.sleepers[id] = nil }
            return due.values.map(\.continuation)
        }
        for continuation in due { continuation.resume() }
    }
}
