/// The admin's pooled read session: one open shared by the callers that come while it is under
/// way, with no task of its own (`SharedOpen`, pure, then the shell over sessions whose open
/// the test holds).
import AMQPClient
import Foundation
import ServiceClock
import Synchronization
import Testing
import TestSupport

@testable import APNSOperations

@Suite struct SharedOpenTests {
    typealias Machine = SharedOpen<Int, String>

    static func turns(_ handed: [(String, Machine.Turn)]) -> [String] {
        handed.map { waiter, turn in
            switch turn {
            case .use(let value): "\(waiter) use \(value)"
            case .open: "\(waiter) open"
            case .failed: "\(waiter) failed"
            case .closed: "\(waiter) closed"
            }
        }
    }

    static func describe(_ turn: Machine.Turn?) -> String {
        guard let turn else { return "wait" }
        return turns([("", turn)])[0].trimmingCharacters(in: .whitespaces)
    }

    @Test func theFirstCallerOpensThoseMeanwhileWaitAndAllShareTheValue() {
        var machine = Machine()
        #expect(Self.describe(machine.get(waiter: "a", id: 1)) == "open")
        #expect(Self.describe(machine.get(waiter: "b", id: 2)) == "wait")
        #expect(Self.describe(machine.get(waiter: "c", id: 3)) == "wait")
        let (waiters, keep) = machine.opened(7)
        #expect(keep)
        #expect(Self.turns(waiters) == ["b use 7", "c use 7"])
        #expect(Self.describe(machine.get(waiter: "d", id: 4)) == "use 7")
    }

    @Test func aFailedOpenFailsItsWaitersAndTheNextCallerOpensAgain() {
        var machine = Machine()
        _ = machine.get(waiter: "a", id: 1)
        _ = machine.get(waiter: "b", id: 2)
        #expect(Self.turns(machine.failed(TestSupportError("refused"), openerCancelled: false)) == ["b failed"])
        #expect(Self.describe(machine.get(waiter: "c", id: 3)) == "open")
    }

    @Test func aCancelledOpenerHandsTheOpenToTheFirstWaiter() {
        var machine = Machine()
        _ = machine.get(waiter: "a", id: 1)
        _ = machine.get(waiter: "b", id: 2)
        _ = machine.get(waiter: "c", id: 3)
        #expect(Self.turns(machine.failed(CancellationError(), openerCancelled: true)) == ["b open"])
        #expect(Self.turns(machine.opened(9).waiters) == ["c use 9"])
    }

    @Test func aCancelledOpenerWithNobodyWaitingLeavesItClosed() {
        var machine = Machine()
        _ = machine.get(waiter: "a", id: 1)
        #expect(machine.failed(CancellationError(), openerCancelled: true).isEmpty)
        #expect(Self.describe(machine.get(waiter: "b", id: 2)) == "open")
    }

    @Test func aWaiterThatLeftIsNotHandedTheValue() {
        var machine = Machine()
        _ = machine.get(waiter: "a", id: 1)
        _ = machine.get(waiter: "b", id: 2)
        _ = machine.get(waiter: "c", id: 3)
        #expect(machine.withdraw(2) == "b")
        #expect(machine.withdraw(2) == nil, "withdrawn once")
        #expect(Self.turns(machine.opened(5).waiters) == ["c use 5"])
        #expect(machine.withdraw(3) == nil, "nothing waits once open")
    }

    @Test func aCloseWhileOpeningClosesTheValueOnArrivalAndTellsTheWaiters() {
        var machine = Machine()
        _ = machine.get(waiter: "a", id: 1)
        _ = machine.get(waiter: "b", id: 2)
        #expect(machine.close() == nil)
        let (waiters, keep) = machine.opened(3)
        #expect(!keep, "the opener closes it")
        #expect(Self.turns(waiters) == ["b closed"])
        #expect(Self.describe(machine.get(waiter: "c", id: 3)) == "open", "a later caller opens anew")
    }

    @Test func aCloseWhenOpenHandsTheValueToCloseAndTheNextCallerOpensAgain() {
        var machine = Machine()
        _ = machine.get(waiter: "a", id: 1)
        _ = machine.opened(4)
        #expect(machine.close() == 4)
        #expect(machine.close() == nil)
        #expect(Self.describe(machine.get(waiter: "b", id: 2)) == "open")
    }
}

@Suite struct PooledSessionTests {
    /// Sessions of the in-memory broker whose opens wait until the test lets each through (a
    /// cancelled open throws).
    final class HeldSessions: BrokerSessionOpening {
        let broker = InMemoryBroker()
        private let state = Mutex((attempts: 0, gates: [Int: StopSignal]()))

        var attempts: Int { state.withLock { $0.attempts } }

        /// Lets open number `attempt` (from 1) through.
        func letThrough(_ attempt: Int) { gate(attempt).stop() }

        private func gate(_ attempt: Int) -> StopSignal {
            state.withLock { state in
                if let gate = state.gates[attempt] { return gate }
                let gate = StopSignal()
                state.gates[attempt] = gate
                return gate
            }
        }

        func open(_ purpose: String) async throws -> InMemoryBroker.Session {
            let attempt = state.withLock { state in
                state.attempts += 1
                return state.attempts
            }
            await gate(attempt).stopped()
            try Task.checkCancellation()
            return try await broker.open(purpose)
        }
    }

    @Test func callersThatComeWhileTheOpenIsUnderWayShareIt() async throws {
        let sessions = HeldSessions()
        let pooled = PooledSession(sessions: sessions)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<3 { group.addTask { _ = try await pooled.get() } }
            try await waitUntil("the open under way") { sessions.attempts == 1 }
            sessions.letThrough(1)
            try await group.waitForAll()
        }
        _ = try await pooled.get()
        #expect(sessions.attempts == 1)
        #expect(sessions.broker.openSessionCount == 1)
        await pooled.close()
        #expect(sessions.broker.openSessionCount == 0)
    }

    /// A caller cancelled while it waits for another's open leaves at once; the open goes on.
    @Test(.timeLimit(.minutes(2))) func aCancelledWaiterLeavesAtOnceAndTheOpenGoesOnForTheOthers() async throws {
        let sessions = HeldSessions()
        let pooled = PooledSession(sessions: sessions)
        let opener = Task { try await pooled.get() }
        try await waitUntil("the open under way") { sessions.attempts == 1 }
        let waiter = Task { try await pooled.get() }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { _ = try await waiter.value }
        #expect(sessions.attempts == 1, "the cancelled waiter opened nothing")
        sessions.letThrough(1)
        _ = try await opener.value
        #expect(sessions.broker.openSessionCount == 1)
        await pooled.close()
    }

    /// An opener cancelled stops its open, and the other caller opens and gets a session (it
    /// was handed the open if it already waited, `SharedOpenTests`, or opens anew if it came
    /// after): its read does not fail for the opener's cancellation.
    @Test(.timeLimit(.minutes(2))) func aCancelledOpenerDoesNotFailTheOtherCaller() async throws {
        let sessions = HeldSessions()
        let pooled = PooledSession(sessions: sessions)
        let opener = Task { try await pooled.get() }
        try await waitUntil("the open under way") { sessions.attempts == 1 }
        let waiting = Task { try await pooled.get() }
        opener.cancel()
        await #expect(throws: CancellationError.self) { _ = try await opener.value }
        try await waitUntil("the waiter opens") { sessions.attempts == 2 }
        sessions.letThrough(2)
        _ = try await waiting.value
        #expect(sessions.broker.openSessionCount == 1)
        await pooled.close()
    }
}
