import AMQPClient
import APNSModel
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import ServiceLifecycleTestKit
import Synchronization
import TestSupport
import Testing

@testable import APNSWorker

/// The pipeline's own logic (hold, probe, shutdown deadline, settle) against a fake broker and a
/// manual clock: no socket, no real waiting for intervals or deadlines. What RabbitMQ does with
/// the pipeline's acks and publishes is tested end to end (`EndToEndTests`).
@Suite struct BundlePipelineTests {
    static let bundle = "com.example.fake"
    static let token = String(repeating: "ab", count: 32)

    struct Rig: Sendable {
        let broker = FakeBroker(workQueue: TopologyNames.workQueue(BundlePipelineTests.bundle))
        let clock = ManualClock()
        let transport: ScriptedTransport
        let statistics = WorkerStatistics()
        let pipeline: BundlePipeline<FakeBroker>

        init(
            answer: TransportResult?, prefetch: UInt16 = 10, shutdownDeadline: Duration = .seconds(30), rollout: RolloutRule = .open,
            observer: (any JobEndObserver)? = nil, logger: Logger? = nil
        ) {
            transport = ScriptedTransport(answer: answer)
            let logger =
                logger
                ?? {
                    var quiet = Logger(label: "pipeline-test")
                    quiet.logLevel = .critical
                    return quiet
                }()
            pipeline = BundlePipeline(
                settings: BundlePipelineSettings(
                    bundleID: BundlePipelineTests.bundle, prefetch: prefetch, retryPolicy: .standard, probeInterval: .seconds(5),
                    shutdownDeadline: shutdownDeadline),
                broker: broker, transport: transport, rollout: rollout, statistics: statistics, logger: logger, observer: observer,
                clock: clock)
        }

        func enqueueJob(syncServer: String? = nil, headers: AMQPTable? = nil, redelivered: Bool = false, timestamp: Date? = nil) {
            let userInfo = syncServer.map { #","userInfo":{"syncServer":"\#($0)"}"# } ?? ""
            broker.enqueue(
                body: Array(#"{"token":"\#(BundlePipelineTests.token)","payload":{"aps":{"alert":"hi"}},"id":"\#(UUID().uuidString)"\#(userInfo)}"#.utf8),
                redelivered: redelivered, headers: headers, timestamp: timestamp)
        }

        func jobs(_ end: JobEnd) -> Int {
            statistics.activity(bundle: BundlePipelineTests.bundle).jobs[end.label] ?? 0
        }

        /// Runs the pipeline while `body` drives it, then shuts it down gracefully and waits for it.
        func running(_ body: (GracefulShutdownTestTrigger) async throws -> Void) async throws {
            try await testGracefulShutdown { trigger in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await pipeline.run() }
                    do {
                        try await body(trigger)
                    } catch {
                        group.cancelAll()
                        throw error
                    }
                    // No polling: a held pipeline sees the shutdown as an event, at once.
                    trigger.triggerGracefulShutdown()
                    _ = try await group.next()
                    group.cancelAll()
                }
            }
        }
    }

    @Test func deliveredJobsAreAckedAndCountedOnce() async throws {
        let rig = Rig(answer: ScriptedTransport.accepted)
        try await rig.running { _ in
            for _ in 0..<3 { rig.enqueueJob() }
            try await waitUntil("3 acks") { rig.broker.snapshot.acked.count == 3 }
        }
        #expect(rig.broker.snapshot.published.isEmpty)
        #expect(rig.broker.snapshot.nacked.isEmpty)
        #expect(rig.jobs(.delivered) == 3)
        #expect(rig.statistics.activity(bundle: Self.bundle).inFlight == 0)
    }

    @Test func aHeldOutcomeStopsConsumingAndProbesOnlyAtTheInterval() async throws {
        let rig = Rig(answer: ScriptedTransport.providerFault)
        try await rig.running { _ in
            rig.enqueueJob()
            // The held job goes back to the end of its queue as a new message, then is acked.
            try await waitUntil("the hold") { rig.pipeline.isHeld && rig.broker.snapshot.acked.count == 1 }
            // (The job sent back may reach the consumer before it is cancelled; it is then nacked
            // back into the queue: at most once per hold.)
            try await waitUntil("the consumer cancelled, the job back in the queue") {
                rig.broker.snapshot.consumersCancelled == 1 && rig.broker.snapshot.ready.count == 1
            }
            #expect(rig.broker.snapshot.published.map(\.routingKey) == [TopologyNames.workQueue(Self.bundle)])

            // Asleep on the clock, before the interval: no probe yet.
            try await waitUntil("the pipeline asleep on the clock") { rig.clock.sleepers == 1 }
            #expect(rig.broker.snapshot.gets == 0)
            rig.clock.advance(by: .seconds(4))
            try await waitUntil("the pipeline asleep again") { rig.clock.sleepers == 1 }
            #expect(rig.broker.snapshot.gets == 0)

            // The interval passed: one probe, still held, the job back in the queue.
            rig.clock.advance(by: .seconds(1))
            try await waitUntil("the first probe settled") { rig.broker.snapshot.acked.count == 2 }
            #expect(rig.broker.snapshot.gets == 1)
            #expect(rig.pipeline.isHeld)
            #expect(rig.transport.sends == 2)

            // APNs accepts the credentials again: the next probe resumes consuming.
            rig.transport.answer(ScriptedTransport.accepted)
            try await waitUntil("the pipeline asleep after the probe") { rig.clock.sleepers == 1 }
            rig.clock.advance(by: .seconds(5))
            try await waitUntil("resumed") { !rig.pipeline.isHeld && rig.broker.snapshot.consumersStarted == 2 }
            #expect(rig.broker.snapshot.gets == 2)
            rig.enqueueJob()
            try await waitUntil("a job consumed after the resume") { rig.broker.snapshot.acked.count == 4 }
        }
        #expect(rig.jobs(.held) == 2)
        #expect(rig.jobs(.delivered) == 2)
    }

    @Test func aProbeThatFindsTheQueueEmptyWaitsAnotherInterval() async throws {
        let rig = Rig(answer: ScriptedTransport.providerFault)
        try await rig.running { _ in
            rig.enqueueJob()
            try await waitUntil("the hold") { rig.pipeline.isHeld && rig.broker.snapshot.acked.count == 1 }
            // Someone else took the job sent back.
            rig.broker.state.withLock { $0.ready.removeAll() }
            try await waitUntil("the pipeline asleep on the clock") { rig.clock.sleepers == 1 }
            rig.clock.advance(by: .seconds(5))
            try await waitUntil("the empty probe") { rig.broker.snapshot.gets == 1 }
            try await waitUntil("the pipeline asleep again") { rig.clock.sleepers == 1 }
            rig.clock.advance(by: .seconds(4))
            try await waitUntil("the pipeline asleep again") { rig.clock.sleepers == 1 }
            #expect(rig.broker.snapshot.gets == 1)
            rig.clock.advance(by: .seconds(1))
            try await waitUntil("the second probe") { rig.broker.snapshot.gets == 2 }
            #expect(rig.pipeline.isHeld)
        }
    }

    @Test func atTheShutdownDeadlineJobsInFlightAreLeftToTheBroker() async throws {
        let rig = Rig(answer: nil, shutdownDeadline: .seconds(30))
        try await rig.running { trigger in
            rig.enqueueJob()
            rig.enqueueJob()
            try await waitUntil("two sends waiting for APNs") { rig.transport.waiting == 2 }
            trigger.triggerGracefulShutdown()
            try await waitUntil("the deadline's timer") { rig.clock.sleepers == 1 }
            rig.clock.advance(by: .seconds(29))
            #expect(rig.transport.waiting == 2)
            rig.clock.advance(by: .seconds(1))
        }
        // The pipeline has stopped. APNs' answers that come now settle nothing.
        #expect(rig.transport.waiting == 2)
        rig.transport.answer(ScriptedTransport.accepted)
        try await waitUntil("the late answers handled") { rig.transport.completed == 2 }
        // Neither acked nor nacked: unacked, the broker delivers them again.
        #expect(rig.broker.snapshot.acked.isEmpty)
        #expect(rig.broker.snapshot.nacked.isEmpty)
        #expect(rig.broker.snapshot.published.isEmpty)
        #expect(rig.broker.snapshot.consumersCancelled == 1)
        #expect(JobEnd.pipelineEnds.allSatisfy { rig.jobs($0) == 0 })
    }

    /// A settle that awaits the broker (here a feedback event's confirm that never comes) is a
    /// child of `run()`: at the shutdown deadline it is cancelled, it does not outlive the pipeline.
    @Test func aSettleStillAwaitingTheBrokerAtTheShutdownDeadlineEndsWithRun() async throws {
        let rig = Rig(answer: ScriptedTransport.unregistered, shutdownDeadline: .seconds(30))
        rig.broker.state.withLock { $0.stallPublishes = true }
        try await rig.running { trigger in
            rig.enqueueJob()
            try await waitUntil("the feedback event's publish waiting for its confirm") { rig.broker.snapshot.stalled.count == 1 }
            trigger.triggerGracefulShutdown()
            try await waitUntil("the deadline's timer") { rig.clock.sleepers == 1 }
            rig.clock.advance(by: .seconds(30))
        }
        // run() has returned: the settle's publish was cancelled before, not left waiting.
        #expect(rig.broker.snapshot.stalled.isEmpty)
        #expect(rig.broker.snapshot.publishesCancelled == 1)
        #expect(rig.broker.snapshot.acked.isEmpty, "nothing acked without the confirm")
        #expect(rig.broker.snapshot.published.isEmpty)
    }

    @Test func jobsThatFinishBeforeTheShutdownDeadlineAreSettled() async throws {
        let rig = Rig(answer: nil)
        try await rig.running { trigger in
            rig.enqueueJob()
            try await waitUntil("a send waiting for APNs") { rig.transport.waiting == 1 }
            trigger.triggerGracefulShutdown()
            try await waitUntil("the deadline's timer") { rig.clock.sleepers == 1 }
            rig.transport.answer(ScriptedTransport.accepted)
            try await waitUntil("the ack") { rig.broker.snapshot.acked.count == 1 }
        }
        #expect(rig.jobs(.delivered) == 1)
        // The deadline's timer was cancelled, not waited out.
        #expect(rig.clock.sleepers == 0)
    }

    @Test func aPublishTheBrokerRefusesLeavesTheJobForRedelivery() async throws {
        let rig = Rig(answer: nil)
        let event = AMQPOutboundMessage(exchange: TopologyNames.feedbackExchange, routingKey: Self.bundle, body: [], properties: .persistentJSON)
        rig.enqueueJob()
        let delivery = try #require(try await rig.broker.get(queue: rig.broker.workQueue))
        rig.broker.state.withLock { $0.failPublishes = true }
        await rig.pipeline.publishThenAck(delivery, event)
        #expect(rig.broker.snapshot.nacked == [delivery.tag])
        #expect(rig.broker.snapshot.acked.isEmpty)
        // Delivered again, and this time the broker confirms: published first, then acked.
        let again = try #require(try await rig.broker.get(queue: rig.broker.workQueue))
        #expect(again.message.redelivered)
        rig.broker.state.withLock { $0.failPublishes = false }
        await rig.pipeline.publishThenAck(again, event)
        #expect(rig.broker.snapshot.published == [event])
        #expect(rig.broker.snapshot.acked == [again.tag])
    }

    @Test func aMalformedJobIsDeadLetteredUnsent() async throws {
        let rig = Rig(answer: ScriptedTransport.accepted)
        try await rig.running { _ in
            rig.broker.enqueue(body: Array(#"{"token":"zz"}"#.utf8), messageID: "m-1")
            try await waitUntil("the ack") { rig.broker.snapshot.acked.count == 1 }
        }
        #expect(rig.broker.snapshot.published.map(\.routingKey) == [TopologyNames.deadQueue(Self.bundle)])
        #expect(rig.transport.sends == 0)
        #expect(rig.jobs(.dead) == 1)
    }

    /// A job over contract §4's 64 KiB arrives without its body (never assembled), so
    /// the worker cannot publish it to the dead queue; it rejects it without requeue for the
    /// broker to dead-letter it unchanged, and goes on with the next job.
    @Test func anOversizedJobIsRejectedForTheBrokerToDeadLetter() async throws {
        let rig = Rig(answer: ScriptedTransport.accepted)
        try await rig.running { _ in
            rig.broker.enqueue(body: [], messageID: "m-big", oversizedBodySize: 1 << 20)
            rig.enqueueJob()
            try await waitUntil("the rejection and the next job") {
                rig.broker.snapshot.rejected.count == 1 && rig.broker.snapshot.acked.count == 1
            }
        }
        #expect(rig.broker.snapshot.published.isEmpty, "nothing to publish: the broker dead-letters it")
        #expect(rig.broker.snapshot.nacked == rig.broker.snapshot.rejected, "no requeue")
        #expect(rig.transport.sends == 1)
        #expect(rig.jobs(.dead) == 1)
        #expect(rig.jobs(.delivered) == 1)
    }

    /// A job stamped `UInt64.max` seconds became the newest publish time for
    /// good (every later queue-latency estimate read 0 s). It is not believed; the next job's is kept.
    @Test func aPublishTimeFarAheadDoesNotStick() async throws {
        let rig = Rig(answer: ScriptedTransport.accepted)
        let real = Date().addingTimeInterval(-30)
        try await rig.running { _ in
            rig.enqueueJob(timestamp: Date(timeIntervalSince1970: TimeInterval(UInt64.max)))
            try await waitUntil("the first ack") { rig.broker.snapshot.acked.count == 1 }
            #expect(rig.pipeline.lastTakenPublishedAt == nil)
            rig.enqueueJob(timestamp: real)
            try await waitUntil("the second ack") { rig.broker.snapshot.acked.count == 2 }
        }
        #expect(rig.pipeline.lastTakenPublishedAt == real)
    }

    @Test func aJobDeliveredTooOftenIsDeadLetteredUnsent() async throws {
        let rig = Rig(answer: ScriptedTransport.accepted)
        try await rig.running { _ in
            rig.enqueueJob(headers: [JobHeaders.deliveryCount: .int64(25)], redelivered: true)
            try await waitUntil("the ack") { rig.broker.snapshot.acked.count == 1 }
        }
        let published = try #require(rig.broker.snapshot.published.first)
        #expect(published.routingKey == TopologyNames.deadQueue(Self.bundle))
        #expect(published.properties.headers?[JobHeaders.reason] == .string(OutcomeRouter.deliveryLimitExceeded))
        #expect(rig.transport.sends == 0)
        #expect(rig.jobs(.dead) == 1)
    }

    /// Contract §4: a header that is no count in 0...2^31−1 counts as absent. 2^63−1 in
    /// `x-apns-attempt` or `x-delivery-count` once trapped on `+ 1`: every instance
    /// that took the job crashed in turn.
    @Test(arguments: [Int64.max, Int64.min, Int64(Int32.max) + 1])
    func aJobWithAnOutOfRangeCountIsSentAndRoutedAsIfTheHeaderWereAbsent(value: Int64) async throws {
        let rig = Rig(answer: ScriptedTransport.accepted)
        try await rig.running { _ in
            rig.enqueueJob(headers: [JobHeaders.attempt: .int64(value), JobHeaders.deliveryCount: .int64(value)], redelivered: true)
            rig.enqueueJob(headers: [JobHeaders.attempt: .string(String(value))], redelivered: false)
            try await waitUntil("two acks") { rig.broker.snapshot.acked.count == 2 }
        }
        #expect(rig.transport.sends == 2)
        #expect(rig.jobs(.delivered) == 2)
    }

    /// Every settled job, sent or not, writes one end line in the words of its count:
    /// `job.end` is the label `apns_worker_jobs_total{outcome}` counts it under, and the message
    /// and level are its `JobEnd.logLine`. The stages before sending write no line of their own
    /// for a job they settle unsent (a malformed job once had a warning and no end line).
    @Test func everySettledJobWritesOneEndLineInTheWordsOfItsCount() async throws {
        let log = CapturedLog(label: "pipeline-test")
        let rig = Rig(answer: ScriptedTransport.unregistered, rollout: RolloutRule(deny: ["old-server"]), logger: log.logger)
        try await rig.running { _ in
            rig.enqueueJob()
            try await waitUntil("the invalid token's end line") { log.ends.count == 1 }
            rig.transport.answer(ScriptedTransport.accepted)
            rig.enqueueJob()
            rig.enqueueJob(syncServer: "old-server")
            rig.broker.enqueue(body: Array(#"{"token":"zz"}"#.utf8), messageID: "m-1")
            rig.broker.enqueue(body: [], messageID: "m-big", oversizedBodySize: 1 << 20)
            try await waitUntil("five end lines") { log.ends.count == 5 }
        }
        let ends = log.ends
        #expect(ends.map(\.end.label).sorted() == ["dead", "dead", "delivered", "gated", "invalid_token"])
        for end in JobEnd.pipelineEnds {
            #expect(ends.filter { $0.end == end }.count == rig.jobs(end), "\(end.label): one line per job counted")
        }
        for line in ends {
            #expect(line.entry.message == line.end.logLine.message.description)
            #expect(line.entry.level == line.end.logLine.level)
        }
        let reasons = ends.filter { $0.end == .dead }.compactMap { $0.entry.metadata["job.reason"] }.sorted()
        #expect(reasons == [JobEnvelope.messageTooLarge, JobError.Kind.malformedJob.rawValue].sorted())
        let warnings = log.entries.filter { $0.level >= .warning }
        #expect(warnings.allSatisfy { $0.metadata["job.end"] != nil }, "\(warnings.map(\.message))")
    }

    @Test func aJobTheRolloutGateGatesGoesToTheFirstRetryQueueUnsent() async throws {
        let rig = Rig(answer: ScriptedTransport.accepted, rollout: RolloutRule(deny: ["old-server"]))
        try await rig.running { _ in
            rig.enqueueJob(syncServer: "old-server")
            rig.enqueueJob(syncServer: "new-server")
            try await waitUntil("two acks") { rig.broker.snapshot.acked.count == 2 }
        }
        #expect(rig.broker.snapshot.published.map(\.routingKey) == [TopologyNames.retryQueue(Self.bundle, delay: RetryPolicy.standard.delays[0])])
        #expect(rig.transport.sends == 1)
        #expect(rig.jobs(.gated) == 1)
        #expect(rig.jobs(.delivered) == 1)
    }

    @Test func jobsTakenBeforeAHoldAreSentBackNotLost() async throws {
        // Prefetch 1: the second job waits in the consumer while the first is held.
        let rig = Rig(answer: ScriptedTransport.providerFault, prefetch: 1)
        try await rig.running { _ in
            for _ in 0..<3 { rig.enqueueJob() }
            try await waitUntil("the hold, every job back in the queue") {
                rig.pipeline.isHeld && rig.broker.snapshot.consumer == nil && rig.broker.snapshot.ready.count == 3
            }
        }
        // However each came back (held, or handed back unsent), it was published anew before
        // its delivery was acked; none was nacked (a nack counts as a delivery on a quorum queue).
        #expect(rig.broker.snapshot.acked.count == rig.broker.snapshot.published.count)
        #expect(rig.jobs(.held) >= 1 && rig.jobs(.held) <= rig.broker.snapshot.published.count)
        #expect(rig.broker.snapshot.nacked.isEmpty)
    }

    /// Contract §4: a job handed back unsent was not tried. A pause (as a hold, a stop, a
    /// re-consume) hands back the deliveries the consumer has as confirmed copies at the end of
    /// the work queue, then acks them; never a nack, which a quorum queue counts as a delivery.
    @Test func aPauseHandsBackTheJobsTheConsumerHasAsCopiesNeverNacks() async throws {
        // Prefetch 1: one job at APNs, the next waits for room in the consumer, a third behind it.
        let rig = Rig(answer: nil, prefetch: 1)
        try await rig.running { _ in
            for _ in 0..<3 { rig.enqueueJob() }
            try await waitUntil("one job at APNs") { rig.transport.waiting == 1 }
            #expect(rig.pipeline.setPaused(true))
            try await waitUntil("the consumer cancelled, the two jobs it had handed back") {
                rig.broker.snapshot.consumer == nil && rig.broker.snapshot.ready.count == 2
                    && rig.broker.snapshot.acked.count == rig.broker.snapshot.published.count
            }
            rig.transport.answer(ScriptedTransport.accepted)
            try await waitUntil("the job at APNs delivered") { rig.jobs(.delivered) == 1 }
        }
        let snapshot = rig.broker.snapshot
        #expect(snapshot.nacked.isEmpty)
        #expect(snapshot.published.count >= 2)
        #expect(snapshot.published.allSatisfy { $0.exchange.isEmpty && $0.routingKey == TopologyNames.workQueue(Self.bundle) })
        #expect(snapshot.acked.count == snapshot.published.count + 1)
        #expect(snapshot.ready.allSatisfy { !$0.message.redelivered })
        #expect(rig.transport.sends == 1)
    }

    /// A pause is an event, not a flag polled: the waiting consumer is cancelled at once, jobs
    /// wait in the broker, and a resume consumes again (no clock moves in this test).
    @Test func aPauseCancelsTheWaitingConsumerAndAResumeConsumesAgain() async throws {
        let rig = Rig(answer: ScriptedTransport.accepted)
        try await rig.running { _ in
            try await waitUntil("consuming") { rig.broker.snapshot.consumersStarted == 1 }
            #expect(rig.pipeline.setPaused(true))
            #expect(!rig.pipeline.setPaused(true), "no change")
            try await waitUntil("the consumer cancelled") { rig.broker.snapshot.consumersCancelled == 1 }
            rig.enqueueJob()
            #expect(rig.broker.snapshot.ready.count == 1)
            #expect(rig.pipeline.setPaused(false))
            try await waitUntil("consumed after the resume") {
                rig.broker.snapshot.consumersStarted == 2 && rig.broker.snapshot.acked.count == 1
            }
        }
        #expect(rig.jobs(.delivered) == 1)
        #expect(rig.clock.sleepers == 0)
    }
}

extension CapturedLog {
    /// The end lines: those with `job.end`, and the end it names.
    var ends: [(end: JobEnd, entry: Entry)] {
        entries.compactMap { entry in entry.metadata["job.end"].flatMap { JobEnd(label: $0) }.map { ($0, entry) } }
    }
}
