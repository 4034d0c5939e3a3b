import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopologyNames
// Scoped: the client's reader (`apns-worker events` reads with it), not APNSModel's writer; the
// module's name is also its client class's, so `APNSWorkerClient.DeliveryEvent` would not name it.
import struct APNSWorkerClient.DeliveryEvent
import Foundation
import Testing
import TestSupport

/// Contract §8 through the real broker, the real `apns-worker` process and the simulator: one
/// event per end with its facts, none for jobs that did not ask, at least once across `kill -9`,
/// and a refused event that never sends its job to Apple again. Serialized: each test runs worker
/// processes, and two cores are all CI has.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct DeliveryEventsEndToEndTests {
    /// A queue of the test's own bound to `apns.events` for the harness's bundle, as a sync server binds it.
    static func bindEvents(_ h: WorkerHarness) async throws -> String {
        let queue = uniqueName("e2e.events")
        _ = try await h.connection.declareQueue(QueueDeclaration(name: queue))
        try await h.connection.bind(BindingDeclaration(queue: queue, exchange: TopologyNames.eventsExchange, routingKey: "\(h.bundle).#"))
        return queue
    }

    /// An event as read back, with the envelope contract §8 fixes checked.
    struct Event {
        var json: [String: Any]
        var messageID: String
        var jobID: String { json["jobId"] as? String ?? "" }
        var end: String { json["end"] as? String ?? "" }
        var status: Int? { (json["status"] as? NSNumber)?.intValue }
        var attempts: Int? { (json["attempts"] as? NSNumber)?.intValue }
        var reason: String? { json["reason"] as? String }
    }

    static func drainEvents(_ h: WorkerHarness, _ queue: String) async throws -> [Event] {
        var out: [Event] = []
        while let delivery = try await h.connection.get(queue: queue) {
            let message = delivery.message
            ContractCapture.record(kind: ContractCapture.deliveryEvent, json: message.body)
            await h.connection.ack(delivery)
            let json = try #require(try JSONSerialization.jsonObject(with: Data(message.body)) as? [String: Any])
            let event = Event(json: json, messageID: message.properties.messageID ?? "")
            #expect(message.routingKey == "\(h.bundle).\(event.end)")
            #expect(message.exchange == TopologyNames.eventsExchange)
            #expect(event.messageID == "\(event.jobID).\(event.end).\(event.attempts ?? -1)")
            #expect(message.properties.deliveryMode == 2)
            #expect(message.properties.contentType == "application/json")
            out.append(event)
        }
        return out
    }

    /// Stops the worker gracefully: every settle finished, so every event it owes is confirmed.
    static func stop(_ worker: ChildProcess) async {
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(60)) == 0)
    }

    @Test func eachEndHasOneEventWithItsFacts() async throws {
        var options = WorkerHarness.Options()
        options.bundleLines = "events = ends"
        options.simulatorEnvironment = .sandbox
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let events = try await Self.bindEvents(h)
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let started = Date()
        let good = WorkerHarness.token(1), gone = WorkerHarness.token(2), refused = WorkerHarness.token(3)
        let failing = WorkerHarness.token(4), silent = WorkerHarness.token(5)
        h.simulator.script(token: gone, .unregistered(timestamp: 1_700_000_000_123))
        h.simulator.script(token: refused, .always(status: 400, reason: .badExpirationDate))
        h.simulator.script(token: failing, .always(status: 500, reason: .internalServerError))
        let goodID = try await h.publishJob(token: good, extra: #","environment":"sandbox""#)
        let goneID = try await h.publishJob(token: gone)
        let refusedID = try await h.publishJob(token: refused)
        let failingID = try await h.publishJob(token: failing)
        try await h.publishJob(token: silent, extra: #","events":"none""#)
        let malformedID = UUID()
        try await h.publishRaw(Array(#"{"token":12,"payload":{}}"#.utf8), messageID: malformedID.uuidString)

        try await waitUntil("three dead letters") { try await h.messageCount(h.deadQueue) == 3 }
        try await waitUntil("the delivered jobs") { h.acceptedTokenCounts()[good] == 1 && h.acceptedTokenCounts()[silent] == 1 }
        try await waitUntil("the invalid token's feedback") { try await h.messageCount(h.feedbackQueue) == 1 }
        await Self.stop(worker)
        let finished = Date()
        let read = try await Self.drainEvents(h, events)
        let byJob = Dictionary(grouping: read, by: \.jobID)
        #expect(read.count == 5, "one per end, none for the job that asked for none: \(read.map { "\($0.jobID) \($0.end)" })")

        let delivered = try #require(byJob[goodID.uuidString]?.first)
        #expect(delivered.end == "delivered")
        #expect(delivered.json["reason"] is NSNull)
        #expect(delivered.status == 200)
        #expect(delivered.attempts == 1)
        #expect(delivered.json["apnsId"] as? String == goodID.uuidString.lowercased())
        #expect((delivered.json["apnsUniqueId"] as? String).flatMap(UUID.init(uuidString:)) != nil, "Apple's development environment names it")
        #expect(delivered.json["token"] as? String == good)
        #expect(delivered.json["environment"] as? String == "sandbox")
        #expect(delivered.json["bundleId"] as? String == h.bundle)
        #expect(delivered.json["groupJobId"] == nil)
        let at = try #require(RFC3339.date(from: delivered.json["at"] as? String ?? ""))
        #expect(at >= started.addingTimeInterval(-1) && at <= finished.addingTimeInterval(1))

        let invalid = try #require(byJob[goneID.uuidString]?.first)
        #expect(invalid.end == "invalidToken" && invalid.reason == "Unregistered" && invalid.status == 410 && invalid.attempts == 1)
        #expect(invalid.json["token"] as? String == gone)
        #expect(invalid.json["environment"] as? String == "production")

        let dead = try #require(byJob[refusedID.uuidString]?.first)
        #expect(dead.end == "dead" && dead.reason == "BadExpirationDate" && dead.status == 400 && dead.attempts == 1)

        let exhausted = try #require(byJob[failingID.uuidString])
        #expect(exhausted.count == 1, "no event for its retries under ends")
        #expect(exhausted.first?.end == "dead" && exhausted.first?.reason == "RetriesExhausted")
        #expect(exhausted.first?.status == 500 && exhausted.first?.attempts == 3)

        let malformed = try #require(byJob[malformedID.uuidString]?.first)
        #expect(malformed.end == "dead" && malformed.reason == "MalformedJob" && malformed.status == 0 && malformed.attempts == 0)
        #expect(malformed.json["apnsId"] is NSNull)
        _ = try? await h.connection.deleteQueue(events)
        await h.shutdown()
    }

    /// `apns-worker events --bundle B [--end E] [--json]`, started beside the test.
    static func follow(_ h: WorkerHarness, _ name: String, _ arguments: [String] = []) async throws -> ChildProcess {
        let follower = try ChildProcess(
            workerExecutable, ["events", "--bundle", h.bundle, "--url", h.broker.amqpURL] + arguments, logPath: "\(h.directory)/\(name).log")
        try await waitUntil("\(name) bound its queue") { follower.log.contains("following the delivery events of \(h.bundle)") }
        return follower
    }

    /// The bundle asks for none (the default): only the jobs that ask have events, `all` with one
    /// per retry scheduled. Two people follow them with `apns-worker events`, one only the deliveries.
    @Test func onlyJobsThatAskHaveEventsAndAllAddsTheRetries() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let events = try await Self.bindEvents(h)
        let everything = try await Self.follow(h, "follow-all")
        let deliveries = try await Self.follow(h, "follow-delivered", ["--end", "delivered", "--json"])
        defer { everything.kill9(); deliveries.kill9() }
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let flaky = WorkerHarness.token(1007)
        h.simulator.script(token: flaky, .failFirst(2, status: 503, reason: .serviceUnavailable))
        let quiet = try await h.publishMany(20)
        let allID = try await h.publishJob(token: flaky, extra: #","events":"all""#)
        let endsID = try await h.publishJob(token: WorkerHarness.token(1008), extra: #","events":"ends""#)
        try await waitUntil("every job delivered") { h.acceptedIDs().distinct.count == 22 }
        await Self.stop(worker)
        let read = try await Self.drainEvents(h, events)
        let quietIDs = Set(quiet.map(\.uuidString))
        #expect(read.allSatisfy { !quietIDs.contains($0.jobID) }, "no event for a job that did not ask")
        let retried = read.filter { $0.jobID == allID.uuidString }
        #expect(retried.map(\.end) == ["retried", "retried", "delivered"])
        #expect(retried.map(\.attempts) == [1, 2, 3])
        #expect(retried.prefix(2).allSatisfy { $0.reason == "ServiceUnavailable" && $0.status == 503 })
        #expect(read.filter { $0.jobID == endsID.uuidString }.map(\.end) == ["delivered"])
        #expect(read.count == 4)
        func lines(_ follower: ChildProcess, _ prefix: String) -> [Substring] {
            follower.log.split(separator: "\n").filter { $0.hasPrefix(prefix) }
        }
        try await waitUntil("the follower's four lines") { lines(everything, "20").count == 4 }
        let plain = lines(everything, "20")
        #expect(plain.filter { $0.contains("  retried  job \(allID.uuidString)  ") && $0.contains("ServiceUnavailable") }.count == 2)
        #expect(plain.contains { $0.contains("  delivered  job \(endsID.uuidString)  ") })
        #expect(!plain.contains { $0.contains(WorkerHarness.token(1008)) }, "the token redacted")
        try await waitUntil("the deliveries' follower's two lines") { lines(deliveries, "{").count == 2 }
        let delivered = try lines(deliveries, "{").map { try DeliveryEvent.parseOrThrow(Array($0.utf8)) }
        #expect(Set(delivered.map(\.jobID)) == [allID.uuidString, endsID.uuidString])
        #expect(delivered.allSatisfy { $0.end == .delivered })
        everything.signal(SIGINT)
        deliveries.signal(SIGINT)
        #expect(await everything.waitForExit(timeout: .seconds(15)) != nil)
        _ = try? await h.connection.deleteQueue(events)
        await h.shutdown()
    }

    /// A message on `apns.events` that the client's reader refuses (anyone who may publish there
    /// can send one; this one a laxer reader took for an event) is shown as refused, with why and
    /// without its content, and the follower goes on to the next event; with `--json`, the lines
    /// that are JSON are the events alone.
    @Test func aMessageThatIsNoEventIsShownAsRefusedAndTheFollowerGoesOn() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let plain = try await Self.follow(h, "follow-refused")
        let json = try await Self.follow(h, "follow-refused-json", ["--json"])
        defer { plain.kill9(); json.kill9() }
        func publish(_ body: [UInt8], end: String) async throws {
            try await h.connection.publish(
                AMQPOutboundMessage(
                    exchange: TopologyNames.eventsExchange, routingKey: "\(h.bundle).\(end)", body: body, properties: .persistentJSON,
                    mandatory: false))
        }
        let jobID = UUID().uuidString.lowercased()
        func written(jobID: String) -> APNSModel.DeliveryEvent {
            APNSModel.DeliveryEvent(
                jobId: jobID, bundleId: h.bundle, end: .dead, reason: "BadDeviceToken", status: 400, apnsId: nil, apnsUniqueId: nil,
                attempts: 1, at: Date(), target: .device(DeviceToken(hex: WorkerHarness.token(31))!), environment: .production, groupJobId: nil)
        }
        // Every member there, but the job id is no UUID: the contract's schema refuses it.
        try await publish(written(jobID: "secret-not-a-job").jsonBytes(), end: "dead")
        try await publish(Array("secret: not even JSON".utf8), end: "dead")
        // The worker's own event, with whitespace and a line break a publisher could add.
        let event = String(decoding: written(jobID: jobID).jsonBytes(), as: UTF8.self)
        let spaced = event.replacingOccurrences(of: ",", with: ",\n  ")
        try await publish(Array(spaced.utf8), end: "dead")
        for follower in [plain, json] {
            try await waitUntil("the follower shows the event after the two refused") { follower.log.contains(jobID) }
            let refused = follower.log.split(separator: "\n").filter { $0.hasPrefix("refused a message on apns.events that is no delivery event") }
            #expect(refused.count == 2)
            #expect(refused.first?.hasSuffix("jobId must be a canonical UUID") == true)
            #expect(refused.last?.hasSuffix("invalid JSON at byte 0: unexpected character") == true)
            #expect(!follower.log.contains("secret"), "a refused message's content is not shown")
        }
        #expect(plain.log.contains("  dead  job \(jobID)  "))
        let jsonLines = json.log.split(separator: "\n").filter { $0.hasPrefix("{") }
        #expect(jsonLines == [Substring(event)], "the body as the worker wrote it, on one line")
        await h.shutdown()
    }

    /// The broker refuses the worker's event (a queue bound to `apns.events` that rejects every
    /// publish: RabbitMQ nacks it, while the test's own queue takes a copy of each try). The job
    /// is not sent to Apple again; its event is published again until the refusing queue is
    /// gone, and only then is the job acked.
    @Test func aRefusedEventNeverSendsItsJobAgain() async throws {
        var options = WorkerHarness.Options()
        options.bundleLines = "events = ends"
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let events = try await Self.bindEvents(h)
        let refusing = uniqueName("e2e.events.full")
        _ = try await h.connection.declareQueue(
            QueueDeclaration(name: refusing, arguments: ["x-max-length": .int(0), "x-overflow": .string("reject-publish")]))
        try await h.connection.bind(BindingDeclaration(queue: refusing, exchange: TopologyNames.eventsExchange, routingKey: "\(h.bundle).#"))
        let worker = try h.startWorker(logLevel: "debug")
        defer { worker.kill9() }
        let token = WorkerHarness.token(21)
        let id = try await h.publishJob(token: token)
        try await waitUntil("the event refused") { worker.log.contains("could not publish a delivery event") }
        // Meanwhile a job given back to the broker would be taken and sent again at once.
        try await Task.sleep(for: .seconds(2))
        #expect(h.acceptedTokenCounts()[token] == 1, "sent once while its event is refused")
        #expect(!worker.log.contains("job delivered"), "not acked while its event is refused")
        _ = try await h.connection.deleteQueue(refusing)
        // The end line is written once the job is settled: its event confirmed, the job acked.
        try await waitUntil("the job settled once nothing refuses its event") { worker.log.contains("job delivered") }
        await Self.stop(worker)
        let read = try await Self.drainEvents(h, events)
        #expect(!read.isEmpty)
        #expect(Set(read.map(\.messageID)) == ["\(id.uuidString).delivered.1"], "one event, published until taken")
        #expect(h.acceptedTokenCounts()[token] == 1, "sent to Apple once")
        #expect(try await h.messageCount(h.workQueue) == 0)
        _ = try? await h.connection.deleteQueue(events)
        await h.shutdown()
    }

    /// Workers killed with SIGKILL mid-drain: every job's end has its event at least once; a
    /// repeat only for a job the kill caught in flight, which Apple was sent again too.
    @Test func everyEndHasItsEventAcrossKillNine() async throws {
        var options = WorkerHarness.Options()
        options.bundleLines = "events = ends"
        options.prefetch = 20
        options.maxInFlight = 20
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(20)))
        let events = try await Self.bindEvents(h)
        let total = 1500, kills = 3
        let ids = try await h.publishMany(total)
        var pool = [try h.startWorker("w0"), try h.startWorker("w1")]
        defer { pool.forEach { $0.kill9() } }
        for n in 0..<kills {
            let point = (n + 1) * total / (kills + 2)
            try await waitUntil("\(point) delivered before kill \(n + 1)", timeout: .seconds(600)) {
                h.acceptedIDs().distinct.count >= point
            }
            let victim = n % pool.count
            pool[victim].signal(SIGKILL)
            _ = await pool[victim].waitForExit(timeout: .seconds(10))
            pool[victim] = try h.startWorker("w\(victim)-\(n + 1)")
        }
        try await waitUntil("all \(total) delivered", timeout: .seconds(900)) { h.acceptedIDs().distinct.count == total }
        try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }
        for worker in pool { await Self.stop(worker) }
        let read = try await Self.drainEvents(h, events)
        let eventsPerJob = Dictionary(grouping: read, by: { $0.jobID.lowercased() }).mapValues(\.count)
        #expect(Set(eventsPerJob.keys) == Set(ids.map { $0.uuidString.lowercased() }), "every end has its event")
        #expect(read.allSatisfy { $0.end == "delivered" })
        let sends = h.simulator.accepted().filter { $0.topic == h.bundle }.reduce(into: [String: Int]()) { $0[$1.apnsID.lowercased(), default: 0] += 1 }
        let repeated = eventsPerJob.filter { $0.value > 1 }
        #expect(repeated.allSatisfy { job, count in count <= sends[job, default: 0] }, "a repeat only for a job sent again")
        #expect(read.count - eventsPerJob.count <= kills * (options.maxInFlight ?? 0), "at most the killed worker's in-flight jobs per kill")
        print("delivery events across kill -9: \(total) jobs, \(kills) kills, \(read.count - eventsPerJob.count) repeated events")
        _ = try? await h.connection.deleteQueue(events)
        await h.shutdown()
    }
}
