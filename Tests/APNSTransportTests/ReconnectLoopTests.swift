/// The connection loop both transports share: when it starts, how long it waits between
/// connections, and every way out. No socket: the attempts and the waits are the test's.
@testable import APNSTransport
import APNSModel
import NIOCore
import NIOEmbedded
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

/// `ReconnectLoop.serve`: one connection from connected to closed, on a testing channel whose
/// clock the test moves.
@Suite struct ConnectionServeTests {
    static func connectedChannel() async throws -> NIOAsyncTestingChannel {
        let channel = NIOAsyncTestingChannel()
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443))
        return channel
    }

    @Test func aConnectionNotReadyInTimeIsClosed() async throws {
        let channel = try await Self.connectedChannel()
        let told = Mutex(false)
        async let served: Void = ReconnectLoop.serve(
            channel, readyWithin: .seconds(10), isReady: { false }, notReady: { told.withLock { $0 = true } })
        // Virtual seconds until the connection is closed: never fewer than the ten it had.
        var seconds = 0
        while channel.isActive && seconds < 600 {
            await channel.testingEventLoop.advanceTime(by: .seconds(1))
            seconds += 1
            await Task.yield()
        }
        await served
        #expect(seconds >= 10)
        #expect(told.withLock { $0 })
        #expect(!channel.isActive)
    }

    @Test func aReadyConnectionIsServedUntilItCloses() async throws {
        let channel = try await Self.connectedChannel()
        let told = Mutex(false)
        async let served: Void = ReconnectLoop.serve(
            channel, readyWithin: .seconds(10), isReady: { true }, notReady: { told.withLock { $0 = true } })
        for _ in 0..<60 {
            await channel.testingEventLoop.advanceTime(by: .seconds(1))
            await Task.yield()
        }
        #expect(channel.isActive)
        try await channel.close()
        await served
        #expect(!told.withLock { $0 })
    }

    @Test func cancellationClosesTheConnection() async throws {
        let channel = try await Self.connectedChannel()
        let task = Task { await ReconnectLoop.serve(channel, readyWithin: .seconds(10), isReady: { true }, notReady: {}) }
        task.cancel()
        await task.value
        #expect(!channel.isActive)
    }
}
