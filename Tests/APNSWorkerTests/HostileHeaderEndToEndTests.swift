import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// Contract §4, "Hostile and damaged input", for a job's headers, through the real broker, the
/// real `apns-worker` process and the simulator.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct HostileHeaderEndToEndTests {
    /// 2^63−1 in `x-apns-attempt` and `x-delivery-count` once trapped the worker on `+ 1`, and
    /// the next instance to take the job trapped in turn. Not counts in 0...2^31−1:
    /// absent. The worker stays up and routes each job as a first attempt.
    @Test func outOfRangeCountHeadersNeitherCrashTheWorkerNorLoseTheJob() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let hostile: AMQPTable = [
            JobHeaders.attempt: .int64(Int64.max), JobHeaders.deliveryCount: .int64(Int64.max), "trace": .string("t-1"),
        ]
        let delivered = UUID(), retried = UUID(), dead = UUID()
        let retriedToken = WorkerHarness.token(71), deadToken = WorkerHarness.token(72)
        h.simulator.script(token: retriedToken, .failFirst(1, status: 503, reason: .serviceUnavailable))
        h.simulator.script(token: deadToken, .badDeviceToken)
        for (id, token) in [(delivered, WorkerHarness.token(70)), (retried, retriedToken)] {
            let body = #"{"token":"\#(token)","payload":{"aps":{"alert":"Hi"}},"id":"\#(id.uuidString)"}"#
            try await h.publishRaw(Array(body.utf8), messageID: id.uuidString, headers: hostile)
        }
        let malformed = Array(#"{"token":"\#(deadToken)","payload":{}}"#.utf8)
        try await h.publishRaw(malformed, messageID: dead.uuidString, headers: hostile)

        try await waitUntil("both good jobs delivered") {
            h.acceptedIDs().distinct.isSuperset(of: [delivered, retried].map { $0.uuidString.lowercased() })
        }
        var deadLetters: [AMQPDelivery] = []
        try await waitUntil("the malformed job dead") {
            deadLetters += try await h.drain(h.deadQueue)
            return !deadLetters.isEmpty
        }
        let letter = try #require(deadLetters.first?.message)
        #expect(letter.body == malformed)
        #expect(letter.properties.headers?[JobHeaders.reason]?.stringValue == "MalformedJob")
        #expect(letter.properties.headers?[JobHeaders.attempts]?.intValue == 0)
        #expect(letter.properties.headers?["trace"] == .string("t-1"))
        // (Its x-delivery-count, if any, is the dead queue's own, written as the test reads it.)
        #expect(letter.properties.headers?[JobHeaders.deliveryCount]?.intValue ?? 0 < 100)
        try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }
        #expect(worker.isRunning, "the worker is alive")
        // And it still serves the next job.
        let after = try await h.publishJob(token: WorkerHarness.token(73))
        try await waitUntil("the next job") { h.acceptedIDs().distinct.contains(after.uuidString.lowercased()) }
        #expect(worker.isRunning)
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(15)) == 0)
        await h.shutdown()
    }
}
