import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// Contract §2 and §4 on the fault paths, through the real broker, the real `apns-worker`
/// process and the simulator: a provider token Apple calls expired, a job whose id the worker
/// generated, and a poison job.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct FaultPathEndToEndTests {
    /// Apple's clock two hours ahead of ours: every token we sign is already expired to it. The
    /// token is renewed and the job sent again; the renewed token is refused too, so the bundle
    /// is held (one loud line, jobs back in the broker, none dead), probed at the probe interval
    /// rather than requeued in a hot loop, and resumes by itself once the clocks agree.
    @Test func expiredProviderTokenIsRenewedThenHeldNeverALoop() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        h.simulator.setFaults(SimulatorFaults(clockSkew: .seconds(2 * 3600)))
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let ids = try await h.publishMany(10)
        try await waitUntil("the hold") { worker.log.contains("bundle HELD") }
        #expect(worker.log.contains("ExpiredProviderToken"))
        try await waitUntil("the held jobs back in the broker") { (9...10).contains(try await h.messageCount(h.workQueue)) }
        // While held, only probes reach Apple: one request each, and at most once a minute a
        // resend with a renewed token. A requeue loop would send hundreds a second.
        let before = h.simulator.counters().received
        let start = ContinuousClock.now
        try await Task.sleep(for: .seconds(3))
        let requests = h.simulator.counters().received - before
        let probes = Int(start.duration(to: .now) / .milliseconds(500)) + 2
        #expect(requests <= probes + 1, "\(requests) requests in \(start.duration(to: .now)) while held")
        #expect(h.acceptedIDs().total == 0)
        #expect(try await h.messageCount(h.deadQueue) == 0)
        #expect(worker.log.components(separatedBy: "bundle HELD").count == 2, "one loud line, not one per job")

        h.simulator.setFaults(.none)
        try await waitUntil("every job delivered after the clocks agree") { h.acceptedIDs().distinct.count == 10 }
        #expect(h.acceptedIDs().distinct == Set(ids.map { $0.uuidString.lowercased() }))
        // Logged once the probe's 200 is back, which can be after the simulator counted it.
        try await waitUntil("the resume logged") { worker.log.contains("bundle resumed") }
        #expect(try await h.messageCount(h.deadQueue) == 0)
        await h.shutdown()
    }

    /// A job with neither an `id` nor a UUID `message_id`: the id the worker makes for it is
    /// the one every attempt logs and the one its dead letter carries as `message_id`.
    @Test func aGeneratedJobIDIsKeptForEveryAttempt() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let token = WorkerHarness.token(77)
        h.simulator.script(token: token, .always(status: 500, reason: .internalServerError))
        try await h.publishRaw(Array(#"{"token":"\#(token)","payload":{"aps":{"alert":"no id"}}}"#.utf8), messageID: "not-a-uuid")
        var dead: [AMQPDelivery] = []
        try await waitUntil("a dead letter") {
            dead += try await h.drain(h.deadQueue)
            return !dead.isEmpty
        }
        let message = try #require(dead.first?.message)
        #expect(message.properties.headers?[JobHeaders.reason]?.stringValue == "RetriesExhausted")
        let jobID = try #require(message.properties.messageID)
        #expect(JobParser.canonicalUUID(jobID) != nil, "the generated id, not the publisher's \(jobID)")
        // The last line is logged once the broker confirmed the dead letter, which a `basic.get`
        // can see before the worker does.
        let attempts = {
            worker.log.split(separator: "\n").filter { $0.contains("job will be retried") || $0.contains("job dead-lettered") }
        }
        try await waitUntil("the three attempts logged: \(attempts())") { attempts().count == 3 }
        for line in attempts() {
            #expect(line.contains(jobID), "every attempt logs the same id: \(line)")
        }
        await h.shutdown()
    }

    /// A job that stalls every worker that takes it (Apple never answers it, and each worker is
    /// killed before its deadline): after `maxDeliveries` deliveries it is dead-lettered with
    /// `DeliveryLimitExceeded` without being sent again, and the next worker carries on.
    @Test func aPoisonJobIsDeadAfterMaxDeliveries() async throws {
        var options = WorkerHarness.Options()
        options.workerLines = "maxDeliveries = 3"
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let poison = WorkerHarness.token(66)
        h.simulator.script(token: poison, .neverAnswer)
        let id = try await h.publishJob(token: poison)
        for attempt in 1...3 {
            let worker = try h.startWorker("worker-\(attempt)")
            try await waitUntil("delivery \(attempt) reaches Apple") { h.simulator.counters().received == attempt }
            worker.signal(SIGKILL)
            _ = await worker.waitForExit(timeout: .seconds(10))
        }
        let last = try h.startWorker("worker-4")
        defer { last.kill9() }
        var dead: [AMQPDelivery] = []
        try await waitUntil("the poison job dead") {
            dead += try await h.drain(h.deadQueue)
            return !dead.isEmpty
        }
        let message = try #require(dead.first?.message)
        #expect(message.properties.messageID == id.uuidString)
        #expect(message.properties.headers?[JobHeaders.reason]?.stringValue == "DeliveryLimitExceeded")
        #expect(h.simulator.counters().received == 3, "the fourth delivery is not sent")
        // The worker that dead-lettered it is alive and delivers the next job.
        let next = try await h.publishJob(token: WorkerHarness.token(67))
        try await waitUntil("the next job delivered") { h.acceptedIDs().distinct.contains(next.uuidString.lowercased()) }
        #expect(last.isRunning)
        await h.shutdown()
    }
}
