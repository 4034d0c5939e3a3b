/// The gate that keeps a bundle's other-environment transport from connecting until a
/// notification needs it: waiters pass once it opens, cancellation ends a wait.
@testable import APNSTransport
import Synchronization
import Testing
import TestSupport

@Suite struct FirstUseGateTests {
    @Test func anOpenGateLetsThroughAtOnce() async throws {
        let gate = FirstUseGate(open: true)
        #expect(gate.isOpen)
        try await gate.waitUntilOpen()
    }

    @Test func waitersPassWhenTheGateOpensAndLaterOnesDoNotWait() async throws {
        let gate = FirstUseGate(open: false)
        let passed = PassCount()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    try await gate.waitUntilOpen()
                    passed.count.withLock { $0 += 1 }
                }
            }
            try await waitUntil("three registered waiters") { gate.waiterCount == 3 }
            #expect(passed.count.withLock { $0 } == 0, "nobody passes a closed gate")
            #expect(!gate.isOpen)
            gate.open()
            gate.open()  // every send opens it; the second call changes nothing
            try await group.waitForAll()
        }
        #expect(passed.count.withLock { $0 } == 3)
        #expect(gate.waiterCount == 0)
        try await gate.waitUntilOpen()
    }

    @Test func aCancelledWaiterThrowsAndTheOthersStillPass() async throws {
        let gate = FirstUseGate(open: false)
        let cancelled = Task { try await gate.waitUntilOpen() }
        let other = Task { try await gate.waitUntilOpen() }
        try await waitUntil("two registered waiters") { gate.waiterCount == 2 }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(gate.waiterCount == 1, "the cancelled waiter is gone, the other still waits")
        #expect(!gate.isOpen)
        gate.open()
        try await other.value
        // A wait from an already cancelled task on a closed gate ends at once too.
        let closed = FirstUseGate(open: false)
        let late = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await closed.waitUntilOpen()
        }
        await #expect(throws: CancellationError.self) { try await late.value }
        #expect(closed.waiterCount == 0)
    }
}

private final class PassCount: Sendable {
    let count = Mutex(0)
}
