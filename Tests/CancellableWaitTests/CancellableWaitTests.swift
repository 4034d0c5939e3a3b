import CancellableWait
import Synchronization
import Testing

/// `withCancellableWait`: a value handed over, an answer at once, and cancellation before and
/// after the waiter registered; none of them may hang or resume twice.
@Suite struct CancellableWaitTests {
    /// Waiters kept by id under a lock, as the transports keep theirs.
    final class Box: Sendable {
        let waiters = Mutex<[Int: CheckedContinuation<Int, Never>]>([:])
        let throwingWaiters = Mutex<[Int: CheckedContinuation<Int, any Error>]>([:])
        let optionalWaiter = Mutex<CheckedContinuation<Int?, any Error>?>(nil)

        func wait(id: Int, immediate: Int? = nil) async -> Int {
            await withCancellableWait(
                register: { continuation in
                    if let immediate { return immediate }
                    self.waiters.withLock { $0[id] = continuation }
                    return nil
                },
                withdraw: { self.waiters.withLock { $0.removeValue(forKey: id) } },
                cancelled: -1)
        }

        func waitThrowing(id: Int) async throws -> Int {
            try await withCancellableWait(
                register: { continuation in
                    self.throwingWaiters.withLock { $0[id] = continuation }
                    return nil
                },
                withdraw: { self.throwingWaiters.withLock { $0.removeValue(forKey: id) } })
        }

        var count: Int { waiters.withLock { $0.count } + throwingWaiters.withLock { $0.count } }

        func hand(_ value: Int, to id: Int) {
            waiters.withLock { $0.removeValue(forKey: id) }?.resume(returning: value)
            throwingWaiters.withLock { $0.removeValue(forKey: id) }?.resume(returning: value)
        }
    }

    static func untilRegistered(_ box: Box, _ count: Int) async {
        while box.count < count { await Task.yield() }
    }

    @Test func anImmediateAnswerDoesNotWait() async {
        let box = Box()
        #expect(await box.wait(id: 1, immediate: 7) == 7)
        #expect(box.count == 0)
    }

    @Test func aHandedValueReachesItsWaiter() async throws {
        let box = Box()
        async let plain = box.wait(id: 1)
        async let throwing = box.waitThrowing(id: 2)
        await Self.untilRegistered(box, 2)
        box.hand(10, to: 1)
        box.hand(20, to: 2)
        #expect(await plain == 10)
        #expect(try await throwing == 20)
    }

    @Test func aTaskCancelledBeforeItRegistersDoesNotHang() async {
        let box = Box()
        let plain = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await box.wait(id: 1)
        }
        let throwing = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await box.waitThrowing(id: 2)
        }
        #expect(await plain.value == -1)
        await #expect(throws: CancellationError.self) { try await throwing.value }
        #expect(box.count == 0)
    }

    @Test func cancellingARegisteredWaiterWithdrawsIt() async {
        let box = Box()
        let plain = Task { await box.wait(id: 1) }
        let throwing = Task { try await box.waitThrowing(id: 2) }
        await Self.untilRegistered(box, 2)
        plain.cancel()
        throwing.cancel()
        #expect(await plain.value == -1)
        await #expect(throws: CancellationError.self) { try await throwing.value }
        #expect(box.count == 0)
        // A late hand-over finds nobody: nothing is resumed twice.
        box.hand(5, to: 1)
    }

    @Test func aThrowingWaitMayEndQuietlyWhenCancelled() async throws {
        let box = Box()
        let task = Task {
            try await withCancellableWait(
                register: { continuation -> Result<Int?, any Error>? in
                    box.optionalWaiter.withLock { $0 = continuation }
                    return nil
                },
                withdraw: { box.optionalWaiter.withLock { waiter in defer { waiter = nil }; return waiter } },
                cancelled: .success(nil))
        }
        while box.optionalWaiter.withLock({ $0 == nil }) { await Task.yield() }
        task.cancel()
        #expect(try await task.value == nil)
    }
}
