import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// Contract §4 through the real broker (quorum queues), the real `apns-worker` process and the
/// simulator: a job handed back unsent was not tried, and a copy the worker publishes carries
/// the properties the job arrived with.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct HandBackEndToEndTests {
    /// A topic Apple refuses (a VoIP job for a key without it), interleaved with good jobs, with
    /// `maxDeliveries = 5`: the bundle holds at each VoIP job and resumes at the next probe of a
    /// good one, handing back the jobs its consumer had each time. Every good job is delivered,
    /// none dead; once the topic is allowed, each refused job is delivered too; and the hold is
    /// told by one loud line, not one per flap. (Before: hand-backs were nacks, which a quorum
    /// queue counts as deliveries, and good jobs died `DeliveryLimitExceeded`; the bundle resumed
    /// at any answer of a job sent before the hold, and logged 24 "bundle HELD" lines a second.)
    @Test func aRefusedTopicAmongGoodJobsKillsNoneAndIsOneLoudHold() async throws {
        var options = WorkerHarness.Options()
        options.prefetch = 20
        options.workerLines = "maxDeliveries = 5"
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let voipToken = WorkerHarness.token(9_000)
        h.simulator.script(token: voipToken, .always(status: 400, reason: .topicDisallowed))

        var good: Set<String> = []
        var voip: Set<String> = []
        for n in 0..<300 {
            if n % 50 == 10 {
                let id = try await h.publishJob(token: voipToken, extra: #","pushType":"voip""#)
                voip.insert(id.uuidString.lowercased())
            }
            good.insert(try await h.publishJob(token: WorkerHarness.token(n)).uuidString.lowercased())
        }
        let worker = try h.startWorker()
        defer { worker.kill9() }
        func accepted() -> Set<String> { Set(h.simulator.accepted().map { $0.apnsID.lowercased() }) }

        try await waitUntil("every good job delivered or dead", timeout: .seconds(180)) {
            let dead = try await h.messageCount(h.deadQueue)
            return accepted().intersection(good).count + Int(dead) >= good.count
        }
        let deadEarly = try await h.drain(h.deadQueue)
        #expect(deadEarly.isEmpty, "dead: \(deadEarly.map { JobEnvelope($0.message).reason ?? "-" })")
        #expect(good.isSubset(of: accepted()))
        #expect(accepted().isDisjoint(with: voip), "refused while the topic is not allowed")

        // The topic allowed: each refused job is delivered, none dead.
        h.simulator.clearScripts()
        try await waitUntil("every refused job delivered", timeout: .seconds(120)) { voip.isSubset(of: accepted()) }
        try await waitUntil("the work queue empty") { try await h.messageCount(h.workQueue) == 0 }
        #expect(try await h.messageCount(h.deadQueue) == 0)

        let loud = worker.log.split(separator: "\n").filter { $0.contains("bundle HELD") }
        #expect(loud.count == 1, "one loud line for the hold: \(loud.count)\n\(KeyScopeHoldEndToEndTests.holdAccount(worker.log).suffix(4_000))")
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        await h.shutdown()
    }

    /// A held bundle's probe that takes a job over the 64 KiB limit dead-letters it as the
    /// consumer does: copied as it arrives, with the x-apns-* headers (`MalformedJob`, status 0),
    /// body unchanged. (Before, the probe rejected it for the broker to dead-letter, headers lost.)
    @Test func aHeldBundlesProbeDeadLettersAnOversizedJobWithItsHeaders() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        h.simulator.setFaults(SimulatorFaults(rejectAllTokens: .invalidProviderToken))
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let held = try await h.publishJob(token: WorkerHarness.token(1))
        try await waitUntil("the bundle held, its consumer gone") {
            let consumers = try await h.connection.inspectQueue(h.workQueue).consumerCount
            return worker.log.contains("bundle HELD") && consumers == 0
        }
        let body = Array(#"{"token":"\#(WorkerHarness.token(2))","payload":{"aps":{"alert":""#.utf8)
            + [UInt8](repeating: UInt8(ascii: "x"), count: 70_000) + Array(#""}}}"#.utf8)
        try await h.publishRaw(body, messageID: "too-large")
        try await waitUntil("the oversized job dead") { try await h.messageCount(h.deadQueue) == 1 }
        let letter = try #require(try await h.drain(h.deadQueue).first)
        #expect(letter.message.body == body)
        #expect(letter.message.properties.messageID == "too-large")
        let envelope = JobEnvelope(letter.message)
        #expect(envelope.reason == JobError.Kind.malformedJob.rawValue)
        #expect(envelope.status == 0)
        #expect(envelope.error?.contains("over the") == true)
        // Logged when the probe's job starts, after `basic.get` had its dead letter confirmed.
        try await waitUntil("taken by a probe") { worker.log.contains("probing held bundle") }

        h.simulator.setFaults(.none)
        try await waitUntil("the held job delivered") { h.acceptedIDs().distinct.contains(held.uuidString.lowercased()) }
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        await h.shutdown()
    }

    /// Contract §2 and §4: a retry copy and a dead letter carry the `message_id` the job arrived
    /// with, byte for byte (a lowercase UUID stays lowercase; bytes that are not UTF-8 stay as
    /// they were), and only an id the worker generated travels as `message_id`.
    @Test func copiesCarryTheMessageIDTheJobArrivedWith() async throws {
        var options = WorkerHarness.Options()
        // The retry copy waits in its queue for the test to read it.
        options.retryDelays = [.seconds(600)]
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let worker = try h.startWorker()
        defer { worker.kill9() }

        func publish(_ body: String, messageID: AMQPShortString?) async throws {
            var properties = AMQPProperties.persistentJSON
            properties.setShortString(.messageID, messageID)
            try await h.connection.publishAgainAfterNacks(
                AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: h.bundle, body: Array(body.utf8), properties: properties))
        }
        func job(_ token: String, id: UUID?) -> String {
            #"{"token":"\#(token)","payload":{"aps":{"alert":"Hi"}}"# + (id.map { #","id":"\#($0.uuidString)""# } ?? "") + "}"
        }
        let retryToken = WorkerHarness.token(700), deadToken = WorkerHarness.token(701), generatedToken = WorkerHarness.token(702)
        h.simulator.script(token: retryToken, .failFirst(1, status: 503, reason: .serviceUnavailable))
        h.simulator.script(token: deadToken, .always(status: 400, reason: .badPriority))
        h.simulator.script(token: generatedToken, .always(status: 400, reason: .badPriority))
        // The job's id is its message_id, a lowercase UUID.
        let lowercase = AMQPShortString(UUID().uuidString.lowercased())
        try await publish(job(retryToken, id: nil), messageID: lowercase)
        // The job's id is in its body; its message_id is not UTF-8.
        let notUTF8 = AMQPShortString(bytes: [0xFF, 0x41, 0xC3])
        try await publish(job(deadToken, id: UUID()), messageID: notUTF8)
        // No id anywhere that is a UUID: the worker generates one.
        try await publish(job(generatedToken, id: nil), messageID: "not-a-uuid")

        let retryQueue = TopologyNames.retryQueue(h.bundle, delay: .seconds(600))
        try await waitUntil("the retry copy and two dead letters") {
            // The worker declares the retry queue of its own delays when it starts.
            let retries = try await h.connection.inspectQueueIfExists(retryQueue)?.messageCount ?? 0
            let dead = try await h.messageCount(h.deadQueue)
            return retries == 1 && dead == 2
        }
        let retried = try #require(try await h.drain(retryQueue).first)
        #expect(retried.message.properties.shortString(.messageID) == lowercase)
        let letters = try await h.drain(h.deadQueue)
        let byToken = Dictionary(
            uniqueKeysWithValues: letters.map { letter in
                (String(decoding: letter.message.body, as: UTF8.self).contains(deadToken) ? "dead" : "generated", letter.message)
            })
        #expect(byToken["dead"]?.properties.shortString(.messageID) == notUTF8)
        let generated = try #require(byToken["generated"]?.properties.messageID)
        #expect(JobParser.canonicalUUID(generated) != nil, "the generated id travels as message_id: \(generated)")
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        await h.shutdown()
    }
}
