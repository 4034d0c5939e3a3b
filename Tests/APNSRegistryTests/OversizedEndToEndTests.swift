import AMQPClient
import APNSModel
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// A message body is never assembled beyond its limit. Against the real broker,
/// PostgreSQL, the simulator and a real `apns-worker run`: 1 MiB jobs, registrations and group
/// jobs land in their `.dead` queues with their body byte for byte and, like every dead letter,
/// the x-apns-* headers of contract §4 (the worker copies them there frame by frame as
/// they arrive; the broker's own dead-lettering left the headers out), `apns-worker dead
/// list`/`show` name the reason, the worker's peak RSS does not grow by their size, and the
/// valid jobs around them are delivered once.
extension RegistryBrokerSuites {
@Suite(.serialized, .enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct OversizedEndToEndTests {
    static let size = 1 << 20
    /// Of each kind; with the worker's prefetch of 100 all of them could be in its hands at once.
    static let count = 12

    /// A message of valid shape padded to `size` bytes with an unknown field.
    static func padded(_ json: String) -> [UInt8] {
        let head = Array(json.dropLast().utf8) + Array(#","padding":""#.utf8)
        return head + [UInt8](repeating: UInt8(ascii: "x"), count: size - head.count - 2) + Array(#""}"#.utf8)
    }

    /// The process's peak resident set (`VmHWM`, kB): what the bodies would have cost had they
    /// been assembled, even if freed since.
    static func peakRSS(_ pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    @Test func oneMebibyteMessagesAreDeadLetteredWithTheirHeadersUnchangedAndNeverHeld() async throws {
        let harness = try await RegistryHarness.start()
        let bundle = harness.bundles[0]
        let dead = TopologyNames.deadQueue(bundle)
        _ = try await harness.connection.purgeQueue(dead)
        try await harness.withWorkers { workers in
            let worker = workers[0]
            // Warm: one job delivered, so the peak already holds what a running worker needs.
            let warm = RegistryHarness.token(800_000)
            try await publishJob(harness, bundle, body: Array(#"{"token":"\#(warm)","payload":{"aps":{"alert":"warm"}}}"#.utf8))
            try await waitUntil("the warm-up job", timeout: .seconds(120)) { harness.accepted(bundle)[warm] == 1 }
            let before = try Self.peakRSS(worker.pid)

            var valid: [String] = []
            var jobs: [[UInt8]] = [], registrations: [[UInt8]] = [], groupJobs: [[UInt8]] = []
            for n in 0..<Self.count {
                let token = RegistryHarness.token(800_001 + n)
                valid.append(token)
                try await publishJob(harness, bundle, body: Array(#"{"token":"\#(token)","payload":{"aps":{"alert":"\#(n)"}}}"#.utf8))
                // The job id in `message_id` too, as the client library publishes it: a listing
                // holds 64 KiB of a body and does not parse a cut one (contract §5), so that is
                // where it finds the id of a job too large for the worker.
                let id = UUID().uuidString
                let job = Self.padded(#"{"token":"\#(token)","payload":{"aps":{"alert":"big"}},"id":"\#(id)"}"#)
                jobs.append(job)
                try await publishJob(harness, bundle, body: job, messageID: id)
                let registration = Self.padded(
                    #"{"op":"register","bundleId":"\#(bundle)","token":"\#(RegistryHarness.token(810_000 + n))","group":"big","at":1}"#)
                registrations.append(registration)
                try await harness.publish(TopologyNames.registry, String(decoding: registration, as: UTF8.self))
                let groupJob = Self.padded(#"{"group":"big","payload":{"aps":{"alert":"big"}}}"#)
                groupJobs.append(groupJob)
                try await harness.publish(TopologyNames.groups, String(decoding: groupJob, as: UTF8.self))
            }
            try await waitUntil("every oversized message dead", timeout: .seconds(180), every: .milliseconds(500)) {
                for queue in [dead, TopologyNames.registryDead, TopologyNames.groupsDead] {
                    guard try await harness.messageCount(queue) == UInt32(Self.count) else { return false }
                }
                return true
            }
            try await waitUntil("every valid job delivered", timeout: .seconds(120)) {
                valid.allSatisfy { harness.accepted(bundle)[$0] != nil }
            }
            #expect(worker.isRunning)
            let after = try Self.peakRSS(worker.pid)
            let total = 3 * Self.count * Self.size / 1024
            print("oversized: worker peak RSS \(before) kB before, \(after) kB after \(3 * Self.count) messages of 1 MiB (\(total) kB)")
            // Half of what the bodies weigh: a worker that held them would grow by all of it (and
            // prefetch × 1 MiB could be in flight). One that does not grows by about 4 MiB on a
            // quiet machine, and once by 9.2 MiB at load 27, when the broker's frames came
            // faster than the worker threw them away.
            #expect(after - before < total / 2, "the worker's peak RSS grew by \(after - before) kB")

            // The operator's view of the bundle's dead queue: every one named, body unchanged.
            let list = try await runProcess(workerExecutable, ["dead", "list", "--json", "--url", try TestBroker.require().amqpURL, "--bundle", bundle])
            #expect(list.status == 0, "\(list.stderr)")
            let listed = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
            #expect(listed.count == Self.count)
            #expect(listed.allSatisfy { $0["reason"] as? String == "MalformedJob" })
            #expect(listed.allSatisfy { $0["bodySize"] as? Int == Self.size }, "a listing gives each cut body's whole size")
            let firstID = try #require(listed.first?["jobID"] as? String)
            let show = try await runProcess(workerExecutable, ["dead", "show", firstID, "--url", try TestBroker.require().amqpURL, "--bundle", bundle])
            #expect(show.status == 0 && show.stdout.contains("MalformedJob"), "\(show.stdout)\(show.stderr)")

            for (queue, bodies) in [(dead, jobs), (TopologyNames.registryDead, registrations), (TopologyNames.groupsDead, groupJobs)] {
                var found: [[UInt8]] = []
                while let letter = try await harness.connection.get(queue: queue) {
                    await harness.connection.ack(letter)
                    let headers = letter.message.properties.headers ?? [:]
                    #expect(headers[JobHeaders.reason]?.stringValue == "MalformedJob", "\(queue)")
                    #expect(headers[JobHeaders.status]?.intValue == 0, "\(queue)")
                    #expect(headers[JobHeaders.attempts]?.intValue == 0, "\(queue)")
                    #expect(headers[JobHeaders.failedAt]?.stringValue != nil, "\(queue)")
                    #expect(headers[JobHeaders.error]?.stringValue?.contains("\(Self.size) bytes") == true, "\(queue)")
                    #expect(headers["x-death"] == nil, "\(queue): not dead-lettered by the broker")
                    found.append(letter.message.body)
                }
                #expect(found.count == bodies.count && Set(found) == Set(bodies), "\(queue): bodies unchanged")
            }
            // Delivered once: each valid token exactly once, nothing of the oversized ones.
            let accepted = harness.accepted(bundle)
            #expect(valid.allSatisfy { accepted[$0] == 1 }, "\(accepted)")
            #expect(accepted.values.reduce(0, +) == Self.count + 1)
            try await waitUntil("the work queues empty") {
                for queue in [TopologyNames.workQueue(bundle), TopologyNames.registry, TopologyNames.groups] {
                    guard try await harness.queueIsSettled(queue) else { return false }
                }
                return true
            }
        }
    }

    private func publishJob(_ harness: RegistryHarness, _ bundle: String, body: [UInt8], messageID: String? = nil) async throws {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = messageID
        try await harness.connection.publishAgainAfterNacks(
            AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: bundle, body: body, properties: properties))
    }
}
}
