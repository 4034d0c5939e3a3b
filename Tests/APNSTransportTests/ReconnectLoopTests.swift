/// The connection loop both transports share: when it starts, how long it waits between
/// connections, and every way out. No socket: the attempts and the waits are the test's.
@testable import APNSTransport
import APNSCore
import ServiceLifecycleTestKit
import Synchronization
import Testing
import TestSupport

@Suite struct ReconnectLoopTests {
    final class Log: Sendable {
        let waits = Mutex<[Duration]>([])
        let attempts = Mutex(0)
        let backingOff = Mutex(0)
    }

    static func loop(_ log: Log, failAfterWaits limit: Int = .max) -> ReconnectLoop {
        ReconnectLoop(
            backoff: ReconnectBackoff(initial: .milliseconds(100), maximum: .milliseconds(800)),
            sleep: { delay in
                let count = log.waits.withLock {
                    $0.append(delay)
                    return $0.count
                }
                if count >= limit { throw CancellationError() }
            })
    }

    @Test func usefulConnectionsAreReplacedAtTheFloorAndFailuresBackOffUpToTheMaximum() async {
        let log = Log()
        let useful = [false, false, false, false, false, true, false]
        let ran = await Self.loop(log, failAfterWaits: useful.count).run(
            after: FirstUseGate(open: true), isShuttingDown: { false }, backingOff: { log.backingOff.withLock { $0 += 1 } }
        ) {
            let attempt = log.attempts.withLock {
                $0 += 1
                return $0
            }
            return useful[attempt - 1]
        }
        #expect(ran)
        #expect(log.waits.withLock { $0 } == [100, 200, 400, 800, 800, 100, 100].map { .milliseconds($0) })
        #expect(log.backingOff.withLock { $0 } == useful.count)
    }

    @Test func shutdownDuringAConnectionEndsTheLoopWithoutWaiting() async {
        let log = Log()
        let shuttingDown = Mutex(false)
        await Self.loop(log).run(after: FirstUseGate(open: true), isShuttingDown: { shuttingDown.withLock { $0 } }) {
            log.attempts.withLock { $0 += 1 }
            shuttingDown.withLock { $0 = true }
            return true
        }
        #expect(log.attempts.withLock { $0 } == 1)
        #expect(log.waits.withLock { $0 }.isEmpty)
    }

    @Test func aGateThatNeverOpensEndsTheLoopAtGracefulShutdownWithoutAnAttempt() async throws {
        let log = Log()
        let gate = FirstUseGate(open: false)
        let ran = await testGracefulShutdown { trigger in
            await withTaskGroup(of: Bool.self) { group in
                group.addTask {
                    await Self.loop(log).run(after: gate, isShuttingDown: { false }) {
                        log.attempts.withLock { $0 += 1 }
                        return true
                    }
                }
                try? await waitUntil("the loop waiting at the gate") { gate.waiterCount == 1 }
                trigger.triggerGracefulShutdown()
                return await group.next() ?? true
            }
        }
        #expect(!ran)
        #expect(log.attempts.withLock { $0 } == 0)
    }

    @Test func theGateOpeningStartsTheFirstAttempt() async throws {
        let log = Log()
        let gate = FirstUseGate(open: false)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await Self.loop(log, failAfterWaits: 1).run(after: gate, isShuttingDown: { false }) {
                    log.attempts.withLock { $0 += 1 }
                    return true
                }
            }
            try? await waitUntil("the loop waiting at the gate") { gate.waiterCount == 1 }
            #expect(log.attempts.withLock { $0 } == 0)
            gate.open()
            await group.waitForAll()
        }
        #expect(log.attempts.withLock { $0 } == 1)
    }

    @Test func cancellationEndsTheLoop() async {
        let log = Log()
        let task = Task {
            await Self.loop(log).run(after: FirstUseGate(open: true), isShuttingDown: { false }) {
                log.attempts.withLock { $0 += 1 }
                withUnsafeCurrentTask { $0?.cancel() }
                return false
            }
        }
        #expect(await task.value)
        #expect(log.attempts.withLock { $0 } == 1)
    }
}
