import AMQPClient
import APNSModel
import APNSSimulator
import Foundation
import Testing
import TestSupport

/// A consumer's long life through the real `apns-worker` process, each on a broker of its own
/// (its connection is then the only `apns-worker run` there): a broker restart while a bundle is
/// held does not end the bundle (its probe fails while the broker is away and is taken again
/// after), and operator pauses and resumes, cycled, leave the worker's channels as they were.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs rabbitmq-server, as scripts/test provides"))
struct ConsumerLifeEndToEndTests {
    /// A broker restart while the bundle is held (APNs refuses its provider token): the held
    /// bundle's probes fail while the broker is away, and once it is back and APNs accepts the
    /// token again every job is delivered, none dead, the process running. The probe's failure
    /// used to end the bundle's unit: the process lived on without a consumer, its jobs waiting
    /// for ever, nothing said.
    @Test func aHeldBundleRidesABrokerRestartOutAndDeliversEveryJobAfter() async throws {
        try await withPrivateBroker { broker in
            let h = try await WorkerHarness.start(broker: broker.coordinates)
            h.simulator.setFaults(SimulatorFaults(rejectAllTokens: .invalidProviderToken))
            let worker = try h.startWorker()
            defer { worker.kill9() }
            let ids = try await h.publishMany(30)
            try await waitUntil("the hold") { worker.log.contains("bundle HELD") }
            try await waitUntil("the held jobs back in the broker") { (29...30).contains(try await h.messageCount(h.workQueue)) }
            try await broker.coordinates.ctl("stop_app")
            // A probe (every 500 ms) meets the outage: the bundle says so (or, without the fix,
            // its unit ends and its transports are released).
            try await waitUntil("a probe during the outage") {
                worker.log.contains("broker unavailable") || worker.log.contains("no longer used")
            }
            try await broker.coordinates.ctl("start_app")
            h.simulator.setFaults(.none)
            try await waitUntil("every job delivered after the restart", timeout: .seconds(120)) { h.acceptedIDs().distinct.count == 30 }
            #expect(h.acceptedIDs().distinct == Set(ids.map { $0.uuidString.lowercased() }))
            // The test's own connection rides the restart out too, and may still be on its way
            // back (`notConnected`) when the worker already is.
            var dead: UInt32?
            try await waitUntil("the dead queue read, once the test's connection is back") {
                dead = try? await h.messageCount(h.deadQueue)
                return dead != nil
            }
            #expect(dead == 0)
            #expect(worker.isRunning)
            #expect(worker.log.components(separatedBy: "broker unavailable").count == 2, "the outage told once")
            // Told once the consumer is back, which its first jobs may beat to the simulator.
            try await waitUntil("the recovery logged") { worker.log.contains("broker reachable again") }
            await h.shutdown()
        }
    }

    /// 30 operator pauses and resumes through the admin API (contract §5): the worker's broker
    /// channels, read from the management API, are as many at the end as at the start, and the
    /// jobs still flow. A cancelled consumer's channel used to stay open until the connection
    /// ended and each resume opened another (6 channels became 36, tried from outside).
    @Test func thirtyPausesAndResumesLeaveTheWorkersChannelsAsTheyWere() async throws {
        try await withPrivateBroker { broker in
            var options = WorkerHarness.Options()
            options.adminLines = "heartbeatInterval = 1s"
            let h = try await WorkerHarness.start(broker: broker.coordinates, options: options)
            let worker = try h.startWorker()
            defer { worker.kill9() }
            let port = try await FleetEndToEndTests.adminPort(worker)
            try await waitUntil("the bundle consuming") { try await h.connection.inspectQueue(h.workQueue).consumerCount == 1 }
            _ = try await h.publishMany(5)
            try await waitUntil("5 delivered") { h.acceptedIDs().distinct.count == 5 }
            // The fixed channels, the bundle's consumer and the fleet's: listed once the
            // broker's statistics caught up (they lag by seconds).
            var before: [Int] = []
            try await waitUntil("the worker's channels listed") {
                before = try await Self.workerChannels(broker.coordinates)
                return before.count >= 5
            }
            for cycle in 0..<30 {
                #expect(try await FleetEndToEndTests.http("POST", port, "/api/bundles/\(h.bundle)/pause").status == 200)
                try await waitUntil("paused (cycle \(cycle))") { try await h.connection.inspectQueue(h.workQueue).consumerCount == 0 }
                #expect(try await FleetEndToEndTests.http("POST", port, "/api/bundles/\(h.bundle)/resume").status == 200)
                try await waitUntil("resumed (cycle \(cycle))") { try await h.connection.inspectQueue(h.workQueue).consumerCount == 1 }
            }
            _ = try await h.publishMany(5)
            try await waitUntil("5 more delivered after the cycles") { h.acceptedIDs().distinct.count == 10 }
            var after: [Int] = []
            let flat = (try? await waitUntil("the worker's channels back to \(before.count)") {
                after = try await Self.workerChannels(broker.coordinates)
                return after.count == before.count
            }) != nil
            #expect(flat, "channels before the 30 cycles \(before), after \(after)")
            #expect(worker.isRunning)
            await h.shutdown()
        }
    }

    /// The channel numbers of the worker's connection (`apns-worker run`) as the management API
    /// lists them.
    static func workerChannels(_ broker: BrokerCoordinates) async throws -> [Int] {
        guard let connections = try await broker.managementJSON("/connections") as? [[String: Any]],
            let connection = connections.first(where: { ($0["client_properties"] as? [String: Any])?["connection_name"] as? String == "apns-worker run" }),
            let server = connection["name"] as? String,
            let path = server.addingPercentEncoding(withAllowedCharacters: .alphanumerics),
            let channels = try await broker.managementJSON("/connections/\(path)/channels") as? [[String: Any]]
        else { return [] }
        return channels.compactMap { $0["number"] as? Int }.sorted()
    }
}
