import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// Contract §4 row by row, through the real broker, the real `apns-worker` process and the
/// simulator. Serialized: each test runs worker processes, and two cores are all CI has.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct EndToEndTests {
    @Test func deliveredJobsAreAckedAndSentOnce() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let ids = try await h.publishMany(50)
        try await waitUntil("50 deliveries") { h.acceptedIDs().distinct.count == 50 }
        #expect(h.acceptedIDs().distinct == Set(ids.map { $0.uuidString.lowercased() }))
        try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(15)) == 0)
        #expect(h.acceptedIDs().total == 50)
        #expect(try await h.messageCount(h.deadQueue) == 0)
        await h.shutdown()
    }

    /// Each environment's pool connects on its first job: the other environment only once a job
    /// asks for it. (Both point at the simulator here, so its count of open connections tells.)
    @Test func theOtherEnvironmentConnectsOnFirstUse() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let production = try await h.publishJob(token: WorkerHarness.token(1))
        try await waitUntil("the production job") { h.acceptedIDs().distinct.contains(production.uuidString.lowercased()) }
        try await waitUntil("the production transport's 2 connections") { h.simulator.counters().openConnections == 2 }
        try await Task.sleep(for: .seconds(1))
        #expect(h.simulator.counters().openConnections == 2, "the production transport's 2 connections only")
        let sandbox = try await h.publishJob(token: WorkerHarness.token(2), extra: #","environment":"sandbox""#)
        try await waitUntil("the sandbox job") { h.acceptedIDs().distinct.contains(sandbox.uuidString.lowercased()) }
        try await waitUntil("the sandbox transport's connections too") { h.simulator.counters().openConnections == 4 }
        await h.shutdown()
    }

    @Test func invalidTokensBecomeFeedbackEventsWithApplesTimestamp() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let gone = WorkerHarness.token(9001), bad = WorkerHarness.token(9002)
        h.simulator.script(token: gone, .unregistered(timestamp: 1_700_000_000_123))
        h.simulator.script(token: bad, .badDeviceToken)
        let goneID = try await h.publishJob(token: gone)
        let badID = try await h.publishJob(token: bad)
        var events: [[String: Any]] = []
        try await waitUntil("two feedback events") {
            for delivery in try await h.drain(h.feedbackQueue) {
                events.append(try #require(try JSONSerialization.jsonObject(with: Data(delivery.message.body)) as? [String: Any]))
            }
            return events.count >= 2
        }
        let byToken = Dictionary(uniqueKeysWithValues: events.map { ($0["token"] as? String ?? "", $0) })
        #expect(byToken[gone]?["reason"] as? String == "Unregistered")
        #expect((byToken[gone]?["timestamp"] as? NSNumber)?.int64Value == 1_700_000_000_123)
        #expect(byToken[gone]?["jobId"] as? String == goneID.uuidString)
        #expect(byToken[gone]?["bundleId"] as? String == h.bundle)
        #expect(byToken[bad]?["reason"] as? String == "BadDeviceToken")
        #expect(byToken[bad]?["timestamp"] is NSNull)
        #expect(byToken[bad]?["jobId"] as? String == badID.uuidString)
        try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }
        #expect(try await h.messageCount(h.deadQueue) == 0)
        await h.shutdown()
    }

    @Test func malformedAndOversizedJobsAreDeadWithTheirBodyUnchanged() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let garbage: [UInt8] = Array("{\"token\": 12, \"payload\": {}}".utf8)
        let notJSON: [UInt8] = [0xff, 0xfe, 0x00, 0x41]
        let big = String(repeating: "x", count: 4200)
        try await h.publishRaw(garbage, messageID: "garbage-1", headers: ["trace": .string("t-1")])
        try await h.publishRaw(notJSON, messageID: "garbage-2")
        let bigID = try await h.publishJob(token: WorkerHarness.token(1), payload: #"{"aps":{"alert":"\#(big)"}}"#)
        var dead: [AMQPDelivery] = []
        try await waitUntil("three dead letters") {
            dead += try await h.drain(h.deadQueue)
            return dead.count >= 3
        }
        let byID = Dictionary(uniqueKeysWithValues: dead.map { ($0.message.properties.messageID ?? "", $0.message) })
        let first = try #require(byID["garbage-1"])
        #expect(first.body == garbage)
        #expect(first.properties.headers?["trace"] == .string("t-1"))
        #expect(first.properties.appID == "sync-server-test")
        #expect(first.properties.contentType == "application/json")
        #expect(first.properties.headers?[JobHeaders.reason]?.stringValue == "MalformedJob")
        #expect(first.properties.headers?[JobHeaders.status]?.intValue == 0)
        #expect(first.properties.headers?[JobHeaders.attempts]?.intValue == 0)
        #expect(first.properties.headers?[JobHeaders.error]?.stringValue?.contains("token") == true)
        let failedAt = try #require(first.properties.headers?[JobHeaders.failedAt]?.stringValue)
        // The form `.formatted(.iso8601)` wrote (the worker writes it by `RFC3339` now), byte for byte.
        let read = try #require(try? Date(failedAt, strategy: .iso8601))
        #expect(read.formatted(.iso8601) == failedAt && failedAt.utf8.count == 20 && failedAt.hasSuffix("Z"))
        #expect(try #require(byID["garbage-2"]).body == notJSON)
        let oversized = try #require(byID[bigID.uuidString])
        #expect(oversized.properties.headers?[JobHeaders.reason]?.stringValue == "PayloadTooLarge")
        #expect(h.simulator.counters().received == 0, "malformed jobs never reach Apple")
        await h.shutdown()
    }

    @Test func transientFailuresAreDeliveredAfterRetries() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let token = WorkerHarness.token(42)
        h.simulator.script(token: token, .failFirst(2, status: 503, reason: .serviceUnavailable))
        let id = try await h.publishJob(token: token)
        try await waitUntil("delivery after two 503s") { h.acceptedIDs().distinct.contains(id.uuidString.lowercased()) }
        #expect(h.simulator.counters().byStatus[503] == 2)
        try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }
        #expect(try await h.messageCount(h.deadQueue) == 0)
        await h.shutdown()
    }

    @Test func alwaysFailingJobsAreDeadAfterMaxAttempts() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let token = WorkerHarness.token(43)
        h.simulator.script(token: token, .always(status: 500, reason: .internalServerError))
        let id = try await h.publishJob(token: token)
        var dead: [AMQPDelivery] = []
        try await waitUntil("a dead letter") {
            dead += try await h.drain(h.deadQueue)
            return !dead.isEmpty
        }
        let headers = try #require(dead.first?.message.properties.headers)
        #expect(dead.first?.message.properties.messageID == id.uuidString)
        #expect(headers[JobHeaders.reason]?.stringValue == "RetriesExhausted")
        #expect(headers[JobHeaders.status]?.intValue == 500)
        #expect(headers[JobHeaders.attempts]?.intValue == 3)
        #expect(h.simulator.counters().byStatus[500] == 3)
        await h.shutdown()
    }

    @Test func unknownBundlesGoToUnrouted() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let stranger = uniqueName("com.example.nobody")
        let marker = UUID().uuidString
        try await h.publishRaw(Array(#"{"token":"00","payload":{"aps":{}}}"#.utf8), messageID: marker, routingKey: stranger)
        var found: AMQPDelivery?
        try await waitUntil("the job in apns.unrouted") {
            while let delivery = try await h.connection.get(queue: TopologyNames.unrouted) {
                if delivery.message.properties.messageID == marker {
                    found = delivery
                    await h.connection.ack(delivery)
                    return true
                }
                await h.connection.nack(delivery, requeue: true)
                return false
            }
            return false
        }
        #expect(found?.message.routingKey == stranger)
        await h.shutdown()
    }

    @Test func rolloutGateGatesDeniedServersAndReloadsOnSIGHUP() async throws {
        var options = WorkerHarness.Options()
        options.bundleLines = "denySyncServers = sync-b.example.com"
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let allowed = try await h.publishJob(token: WorkerHarness.token(1), extra: #","userInfo":{"syncServer":"sync-a.example.com"}"#)
        let denied = try await h.publishJob(token: WorkerHarness.token(2), extra: #","userInfo":{"syncServer":"SYNC-B.example.com"}"#)
        try await waitUntil("the allowed job") { h.acceptedIDs().distinct.contains(allowed.uuidString.lowercased()) }
        try await Task.sleep(for: .seconds(2))
        #expect(!h.acceptedIDs().distinct.contains(denied.uuidString.lowercased()), "the gate gates sync-b")
        #expect(try await h.messageCount(h.deadQueue) == 0, "gated, not dead")
        // Open the gate in the file and tell the running worker.
        let config = try String(contentsOfFile: h.configPath, encoding: .utf8)
        try config.replacingOccurrences(of: "denySyncServers = sync-b.example.com", with: "")
            .write(toFile: h.configPath, atomically: true, encoding: .utf8)
        worker.signal(SIGHUP)
        try await waitUntil("the denied job after the reload") { h.acceptedIDs().distinct.contains(denied.uuidString.lowercased()) }
        #expect(worker.isRunning)
        try await waitUntil("the reload logged") {
            worker.log.split(separator: "\n").contains { $0.contains("configuration change applied") && $0.contains("denySyncServers") }
        }
        await h.shutdown()
    }

    @Test func heldBundlePausesAndResumesWithoutRestartOrDeadLetters() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        h.simulator.setFaults(SimulatorFaults(rejectAllTokens: .invalidProviderToken))
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let ids = try await h.publishMany(30)
        try await waitUntil("the hold") { worker.log.contains("bundle HELD") }
        // Jobs in flight when the hold began come back one by one as their sends fail; on a
        // loaded machine that takes a while. Ready messages only: a probe may have one of them
        // out (basic.get) at any moment.
        try await waitUntil("the held jobs back in the broker") { (29...30).contains(try await h.messageCount(h.workQueue)) }
        #expect(h.acceptedIDs().total == 0)
        #expect(try await h.messageCount(h.deadQueue) == 0)
        #expect(worker.log.components(separatedBy: "bundle HELD").count == 2, "one loud line, not one per job")
        h.simulator.setFaults(.none)
        try await waitUntil("every job delivered after the hold") { h.acceptedIDs().distinct.count == 30 }
        #expect(h.acceptedIDs().distinct == Set(ids.map { $0.uuidString.lowercased() }))
        // Logged once the probe's 200 is back, which can be after the simulator counted it.
        try await waitUntil("the resume logged") { worker.log.contains("bundle resumed") }
        #expect(try await h.messageCount(h.deadQueue) == 0)
        #expect(worker.isRunning)
        await h.shutdown()
    }
}

/// Crash and scale tests: kill -9, SIGTERM, a broker restart, two workers.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct ReliabilityTests {
    @Test func killNineLosesNothingAndDuplicatesAtMostWhatIsInFlight() async throws {
        var options = WorkerHarness.Options()
        // The window starts at the prefetch and grows to the budget: the budget bounds it.
        options.prefetch = 200
        options.maxInFlight = 200
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(20)))
        let ids = try await h.publishMany(3000)
        let first = try h.startWorker("first")
        try await waitUntil("some deliveries before the kill") { h.acceptedIDs().distinct.count >= 300 }
        first.signal(SIGKILL)
        _ = await first.waitForExit(timeout: .seconds(5))
        let second = try h.startWorker("second")
        defer { second.kill9() }
        try await waitUntil("all 3000 delivered after the restart", timeout: .seconds(120)) { h.acceptedIDs().distinct.count == 3000 }
        let (distinct, total) = h.acceptedIDs()
        #expect(distinct == Set(ids.map { $0.uuidString.lowercased() }))
        let duplicates = total - distinct.count
        print("kill -9 with jobs in flight: 3000 jobs, \(duplicates) sent twice (maxInFlight \(options.maxInFlight ?? 0))")
        #expect(duplicates <= options.maxInFlight ?? 0)
        await h.shutdown()
    }

    @Test func sigtermFinishesInFlightJobsAndExitsZero() async throws {
        // 10 in flight at 50 ms each: at most 200 jobs/s, so the 2000 take about 10 s and a
        // SIGTERM that reaches the worker late still finds most of them in the broker.
        var options = WorkerHarness.Options()
        options.prefetch = 10
        options.maxInFlight = 10
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(50)))
        let total = 2000
        let ids = try await h.publishMany(total)
        let first = try h.startWorker("first")
        try await waitUntil("some deliveries") { h.acceptedIDs().distinct.count >= 100 }
        first.signal(SIGTERM)
        let status = await first.waitForExit(timeout: .seconds(30))
        #expect(status == 0)
        // Within the 10 s deadline, as the worker saw it: a stall of this test process (seen at
        // 41 s on a loaded machine) would stretch a duration measured here.
        #expect(!first.log.contains("at the deadline are handed back"), "every job in flight finished: \(first.log.suffix(2000))")
        let afterStop = h.acceptedIDs()
        #expect(afterStop.distinct.count < total, "the rest is left in the broker")
        let second = try h.startWorker("second")
        defer { second.kill9() }
        try await waitUntil("all \(total) delivered", timeout: .seconds(120)) { h.acceptedIDs().distinct.count == total }
        #expect(h.acceptedIDs().distinct == Set(ids.map { $0.uuidString.lowercased() }))
        print("SIGTERM mid-run: \(afterStop.distinct.count) delivered before the stop, \(h.acceptedIDs().total - total) sent twice")
        await h.shutdown()
    }

    @Test func twoWorkersShareOneQueueAndDeliverEachJobOnce() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(10)))
        let a = try h.startWorker("a"), b = try h.startWorker("b")
        defer { a.kill9(); b.kill9() }
        try await waitUntil("two consumers") { try await h.connection.inspectQueue(h.workQueue).consumerCount == 2 }
        let ids = try await h.publishMany(2000)
        try await waitUntil("all 2000 delivered", timeout: .seconds(90)) { h.acceptedIDs().distinct.count == 2000 }
        #expect(h.acceptedIDs().distinct == Set(ids.map { $0.uuidString.lowercased() }))
        #expect(h.acceptedIDs().total == 2000, "no job sent twice")
        a.signal(SIGTERM); b.signal(SIGTERM)
        #expect(await a.waitForExit(timeout: .seconds(15)) == 0)
        #expect(await b.waitForExit(timeout: .seconds(15)) == 0)
        let shareA = Self.deliveredCount(in: a.log), shareB = Self.deliveredCount(in: b.log)
        print("two workers: \(shareA) + \(shareB) deliveries")
        #expect(shareA > 0 && shareB > 0, "both took a share")
        #expect(shareA + shareB == 2000)
        await h.shutdown()
    }

    @Test func brokerRestartLosesNothing() async throws {
        try await withPrivateBroker { broker in
            var options = WorkerHarness.Options()
            options.prefetch = 20
            options.maxInFlight = 20
            let h = try await WorkerHarness.start(broker: broker.coordinates, options: options)
            h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(20)))
            let total = 3000
            let ids = try await h.publishMany(total)
            let worker = try h.startWorker()
            defer { worker.kill9() }
            try await waitUntil("some deliveries") { h.acceptedIDs().distinct.count >= 100 }
            // Slow APNs down to 20 jobs per 2 s, so that however long rabbitmqctl takes to stop
            // the broker (many seconds on a loaded machine), it goes down with jobs in flight and
            // most of them still queued.
            h.simulator.setFaults(SimulatorFaults(latency: .seconds(2)))
            try await broker.coordinates.ctl("stop_app")
            let deliveredAtStop = h.acceptedIDs().distinct.count
            #expect(deliveredAtStop < total, "the broker stopped while jobs were still flowing")
            try await Task.sleep(for: .seconds(2))
            h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(20)))
            try await broker.coordinates.ctl("start_app")
            try await waitUntil("all \(total) delivered after the broker restart", timeout: .seconds(120)) {
                h.acceptedIDs().distinct.count == total
            }
            #expect(h.acceptedIDs().distinct == Set(ids.map { $0.uuidString.lowercased() }))
            #expect(worker.isRunning, "the worker reconnected by itself")
            let duplicates = h.acceptedIDs().total - total
            print("broker restart: \(deliveredAtStop) of \(total) delivered at the stop, \(duplicates) sent twice (maxInFlight \(options.maxInFlight ?? 0))")
            #expect(duplicates <= options.maxInFlight ?? 0, "only the jobs in flight when the broker went down")
            await h.shutdown()
        }
    }

    /// The `jobs.delivered` figure each pipeline logs when it stops.
    static func deliveredCount(in log: String) -> Int {
        log.split(separator: "\n").filter { $0.contains("pipeline stopped") }.compactMap { line -> Int? in
            guard let range = line.range(of: "jobs.delivered=") else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }.reduce(0, +)
    }
}
