// The connection's one lifetime (`connect()` to `close()`, the worker's service group run
// `whileConnected`) and the decision of when a caller wakes its owner thread (`WakeDecision`).
import AMQPClient
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport

@testable import AMQPClient

/// When a queued command must signal the sleeping owner thread: pure, no thread, no eventfd.
@Suite struct WakeDecisionTests {
    enum Queued { case ack, command }

    /// Whether each of `queued`, in order, signals the eventfd.
    static func signals(_ wake: inout WakeDecision, _ queued: Queued...) -> [Bool] {
        queued.map { $0 == .ack ? wake.ackQueued() : wake.commandQueued() }
    }

    @Test func anAwakeThreadIsNeverSignalled() {
        var wake = WakeDecision()
        #expect(Self.signals(&wake, .command, .ack) == [false, false])
    }

    @Test func theFirstCommandQueuedWhileItSleepsSignalsItOnce() {
        var wake = WakeDecision()
        wake.goingToSleep(ackBatch: nil)
        // Once signalled, the next callers need not write to the eventfd again.
        #expect(Self.signals(&wake, .command, .command, .ack) == [true, false, false])
    }

    @Test func withoutABriefSleepTheFirstAckSignalsAsAnyCommand() {
        var wake = WakeDecision()
        wake.goingToSleep(ackBatch: nil)
        #expect(Self.signals(&wake, .ack) == [true])
        #expect(!wake.sleeping)
    }

    @Test func inABriefSleepAcksSignalOnlyOnceAFullBatchIsQueued() {
        var wake = WakeDecision()
        wake.goingToSleep(ackBatch: 4)
        #expect(Self.signals(&wake, .ack, .ack, .ack, .ack, .ack) == [false, false, false, true, false])
    }

    @Test func inABriefSleepAnyOtherCommandSignalsAtOnce() {
        var wake = WakeDecision()
        wake.goingToSleep(ackBatch: 64)
        #expect(Self.signals(&wake, .ack, .command) == [false, true])
    }

    @Test func eachSleepCountsItsOwnAcksAndWakingUpEndsTheBatch() {
        var wake = WakeDecision()
        wake.goingToSleep(ackBatch: 2)
        #expect(Self.signals(&wake, .ack) == [false])
        wake.wokeUp()
        #expect(Self.signals(&wake, .ack) == [false])
        wake.goingToSleep(ackBatch: 2)
        #expect(Self.signals(&wake, .ack, .ack) == [false, true])
        wake.goingToSleep(ackBatch: nil)
        #expect(wake.ackBatch == nil && wake.acksWhileSleeping == 0)
    }
}

/// The connection's life without a broker: nothing listens where it connects.
@Suite struct ConnectionServiceWithoutBrokerTests {
    static func unreachable() throws -> AMQPConfiguration {
        var configuration = AMQPConfiguration(urls: [try AMQPURL(string: "amqp://guest:guest@127.0.0.1:\(unreachablePort)/%2f")], connectionName: "unreachable")
        configuration.connectTimeout = .seconds(2)
        return configuration
    }

    @Test func connectThrowsWhenTheFirstConnectGivesUpAndWhatWasQueuedFailsAsClosed() async throws {
        let connection = try AMQPConnection(configuration: try Self.unreachable(), logger: testLogger())
        let publish = Task { try await connection.publish(message("x", to: "nowhere")) }
        let error = await #expect(throws: AMQPError.self) { try await connection.connect() }
        #expect(error?.code == .connectionFailed)
        await #expect(throws: AMQPError.self) { try await publish.value }
        #expect(connection.state == .closed)
        // Ended for good: a second connect fails at once, and the body of `whileConnected` never runs.
        let again = await #expect(throws: AMQPError.self) { try await connection.whileConnected { Issue.record("ran while closed") } }
        #expect(again?.code == .closed)
    }

    @Test func aConnectionClosedBeforeItStartedNeverStartsAndFailsWhatWasQueued() async throws {
        let connection = try AMQPConnection(configuration: try Self.unreachable(), logger: testLogger())
        let declared = Task { try await connection.inspectQueue("q") }
        try await Task.sleep(for: .milliseconds(50))
        await connection.close()
        let error = await #expect(throws: AMQPError.self) { try await declared.value }
        #expect(error?.code == .closed)
        #expect(connection.state == .closed)
        let connect = await #expect(throws: AMQPError.self) { try await connection.connect() }
        #expect(connect?.code == .closed)
    }

    @Test func aConfigurationWithoutURLIsRefusedAtOnce() {
        #expect(throws: AMQPError.self) { try AMQPConnection(configuration: AMQPConfiguration(urls: [], connectionName: "none"), logger: testLogger()) }
    }
}

/// A service group run `whileConnected`, as `apns-worker run` does, against the real broker.
@Suite(.enabled(if: TestBroker.isAvailable))
struct ConnectionServiceTests {
    /// Consumes one message and, on graceful shutdown, settles it only after a while: as the
    /// worker does with its jobs in flight.
    final class SlowSettlingConsumer: Service {
        let connection: AMQPConnection
        let queue: String
        let taken = Mutex(false)

        init(connection: AMQPConnection, queue: String) {
            self.connection = connection
            self.queue = queue
        }

        func run() async throws {
            let consumer = try await connection.consume(queue: queue, prefetch: 1)
            var iterator = consumer.makeAsyncIterator()
            guard let delivery = try await iterator.next() else { return }
            taken.withLock { $0 = true }
            try? await gracefulShutdown()
            try await Task.sleep(for: .milliseconds(500))
            await connection.ack(delivery)
            await consumer.cancel()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func itServesCallsMadeBeforeItConnectedAndClosesOnlyAfterTheGroupsServicesSettled() async throws {
        let broker = try TestBroker.require()
        let queue = uniqueName("service")
        let connection = try AMQPConnection(configuration: try configuration(broker), logger: testLogger())
        // Queued before `connect()`: carried out once the connection is up.
        let declared = Task {
            try await connection.declareQueue(QueueDeclaration(name: queue))
            try await connection.publish(message("job", to: queue))
        }
        let consumer = SlowSettlingConsumer(connection: connection, queue: queue)
        let group = ServiceGroup(configuration: .init(services: [.init(service: consumer)], logger: testLogger()))
        try await connection.whileConnected {
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                try await declared.value
                #expect(connection.state == .connected)
                try await eventually(.seconds(20), "the job taken") { consumer.taken.withLock { $0 } }
                await group.triggerGracefulShutdown()
                try await tasks.waitForAll()
            }
        }
        #expect(connection.state == .closed)
        // The ack made during the consumer's shutdown reached the broker before the close.
        try await withConnection(try configuration(broker)) { check in
            try await eventually(.seconds(10), "the queue empty") { try await check.inspectQueue(queue).messageCount == 0 }
            try await check.deleteQueue(queue)
        }
    }
}

/// The serve loop's sleeps and ack timing, from coalescers and times given by the test.
@Suite struct ServeScheduleTests {
    static let poll = Duration.milliseconds(200)
    static let ms: UInt64 = 1_000_000

    @Test func withNothingHeldTheThreadSleepsThePollIntervalAndAnyCommandWakesIt() {
        #expect(ServeSchedule.sleep(pollInterval: Self.poll, acks: [AckCoalescer](), now: 0) == .init(timeout: Self.poll, ackBatch: nil))
        // A coalescer with nothing waiting and no deliveries changes nothing.
        #expect(ServeSchedule.sleep(pollInterval: Self.poll, acks: [AckCoalescer()], now: 0) == .init(timeout: Self.poll, ackBatch: nil))
    }

    @Test func anAckHeldBehindAnUnfinishedTagCutsTheSleepToItsDeadline() {
        var acks = AckCoalescer(maxDelay: 150 * Self.ms, batch: 1)
        acks.delivered(2, now: 0)
        acks.ack(2, now: 0)
        #expect(acks.flush(now: 0).isEmpty)
        // Tag 1 is unfinished: tag 2 waits until 150 ms. Acks are quiet by 120 ms, so the sleep
        // is not brief, only cut to the deadline.
        #expect(ServeSchedule.sleep(pollInterval: Self.poll, acks: [acks], now: 120 * Self.ms) == .init(timeout: .milliseconds(30), ackBatch: nil))
        // Past the deadline: no sleep at all (the next turn sends it).
        #expect(ServeSchedule.sleep(pollInterval: Self.poll, acks: [acks], now: 300 * Self.ms).timeout == .zero)
    }

    @Test func whileAcksKeepComingTheSleepIsBriefAndWaitsForTheSmallestBatch() {
        var fast = AckCoalescer(maxDelay: 20 * Self.ms, batch: 8, batchDelay: 1 * Self.ms)
        var slow = AckCoalescer(maxDelay: 20 * Self.ms, batch: 32, batchDelay: 2 * Self.ms)
        for tag in 1...10 as ClosedRange<UInt64> {
            fast.delivered(tag, now: 0)
            slow.delivered(tag, now: 0)
        }
        fast.ack(1, now: 0)
        slow.ack(1, now: 0)
        _ = fast.flush(now: 0, force: true)
        _ = slow.flush(now: 0, force: true)
        let sleep = ServeSchedule.sleep(pollInterval: Self.poll, acks: [fast, slow], now: 10 * Self.ms)
        #expect(sleep == .init(timeout: .milliseconds(1), ackBatch: 8))
        // Once acks have been quiet a while, a stuck consumer no longer makes the sleep brief.
        #expect(ServeSchedule.sleep(pollInterval: Self.poll, acks: [fast, slow], now: 500 * Self.ms).ackBatch == nil)
    }

    @Test func acksQueuedDuringABriefSleepCountFromItsStartAndOtherwiseFromWhenTheyAreTaken() {
        var schedule = ServeSchedule()
        #expect(schedule.commandsTaken(now: 5) == 5)
        schedule.sleeping(.init(timeout: .milliseconds(1), ackBatch: 8), now: 100)
        #expect(schedule.commandsTaken(now: 130) == 100)
        #expect(schedule.commandsTaken(now: 140) == 140)
        schedule.sleeping(.init(timeout: .milliseconds(1), ackBatch: 8), now: 200)
        schedule.noCommands()
        #expect(schedule.commandsTaken(now: 260) == 260)
        schedule.sleeping(.init(timeout: Self.poll, ackBatch: nil), now: 300)
        #expect(schedule.commandsTaken(now: 400) == 400)
    }
}
