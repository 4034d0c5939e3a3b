/// The gate that keeps a bundle's other-environment transport from connecting until a
/// notification needs it: waiters pass once it opens, cancellation ends a wait.
@testable import APNSTransport
import Synchronization
import Testing

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
            try await Task.sleep(for: .milliseconds(100))
            #expect(passed.count.withLock { $0 } == 0, "nobody passes a closed gate")
            #expect(!gate.isOpen)
            gate.open()
            gate.open()  // every send opens it; the second call changes nothing
            try await group.waitForAll()
        }
        #expect(passed.count.withLock { $0 } == 3)
        try await gate.waitUntilOpen()
    }

    @Test func cancellingAWaitThrowsAndLeavesTheGateClosed() async throws {
        let gate = FirstUseGate(open: false)
        let waiter = Task { try await gate.waitUntilOpen() }
        try await Task.sleep(for: .milliseconds(50))
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(!gate.isOpen)
        // A wait from an already cancelled task ends at once too.
        let late = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await gate.waitUntilOpen()
        }
        await #expect(throws: CancellationError.self) { try await late.value }
    }
}

private final class PassCount: Sendable {
    let count = Mutex(0)
}
