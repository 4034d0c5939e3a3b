import AMQPClient
import APNSCore
import APNSWorker
import Foundation
import Testing
import TestSupport

/// Contract §4 and §5 on the real broker: anyone on the vhost can publish on `apns.fleet`.
/// Forged heartbeats (the `Int.min`-then-0 pair that trapped every listener, control characters,
/// endless strings, more than 1,000 instances, garbage) neither stop a running worker nor
/// corrupt its fleet view, and `GET /api/fleet` says what was dropped. One of the serialized
/// fleet suites: the flood of forged instances fills every listener's view for a few seconds.
extension FleetEndToEndTests {
    static func forge(_ h: WorkerHarness, _ body: [UInt8]) async throws {
        try await h.connection.publish(
            AMQPOutboundMessage(
                exchange: TopologyNames.fleetExchange, routingKey: "", body: body,
                properties: AMQPProperties(contentType: "application/json", deliveryMode: 1), mandatory: false))
    }

    static func forged(_ id: String, delivered: Int, bundle: String = "forged.bundle") -> FleetInstance {
        // A five-second interval: the forged instances leave every view within 15 s, long
        // enough for the flood to fill it on a slow machine.
        FleetInstance(
            id: id, host: "forger", pid: 1, version: "6.6.6", startedAt: Date(), rssBytes: 1, cpuSeconds: 0, broker: "connected",
            heartbeatInterval: 5, bundles: [bundle: FleetInstance.Bundle(delivered: delivered)])
    }

    @Test func forgedHeartbeatsNeitherStopAWorkerNorCorruptItsView() async throws {
        let h = try await Self.harness()
        let worker = try h.startWorker("worker")
        defer { worker.kill9() }
        let port = try await Self.adminPort(worker)
        try await waitUntil("the worker in its own fleet view") { try await Self.fleet(port, bundle: h.bundle).instances.count == 1 }

        // The pair that overflowed `count - previous` in every listener, with this test's bundle.
        try await Self.forge(h, FleetMessage.heartbeat(Self.forged("forger-1", delivered: 0, bundle: h.bundle)).encoded())
        for delivered in [Int.min, 0, Int.max, 0, -1, 1 << 60] {
            let text = String(decoding: FleetMessage.heartbeat(Self.forged("forger-1", delivered: 7, bundle: h.bundle)).encoded(), as: UTF8.self)
            try await Self.forge(h, Array(text.replacingOccurrences(of: #""delivered":7"#, with: #""delivered":\#(delivered)"#).utf8))
        }
        // Control characters, long strings, garbage, a pause for a bundle with NUL.
        var bad = Self.forged("evil\u{0}\r\nid", delivered: 1)
        try await Self.forge(h, FleetMessage.heartbeat(bad).encoded())
        bad = Self.forged(String(repeating: "x", count: 100_000), delivered: 1)
        try await Self.forge(h, FleetMessage.heartbeat(bad).encoded())
        try await Self.forge(h, Array("not json at all".utf8))
        try await Self.forge(h, [UInt8](repeating: 0xFF, count: 2 << 20))
        try await Self.forge(h, FleetMessage.pause(bundleID: "\(h.bundle)\u{0}").encoded())
        // More instances than a view keeps.
        for n in 0..<(FleetView.maxInstances + 100) {
            try await Self.forge(h, FleetMessage.heartbeat(Self.forged("flood-\(n)", delivered: n)).encoded())
        }

        // The worker lives and keeps delivering, and its view counts only its own real work.
        let published = 50
        _ = try await h.publishMany(published)
        try await waitUntil("\(published) deliveries after the forgeries", timeout: .seconds(120)) { h.acceptedIDs().distinct.count == published }
        try await waitUntil("the view to count the worker's \(published) jobs, the forgers gone", timeout: .seconds(120)) {
            let report = try await Self.fleet(port, bundle: h.bundle)
            return report.instances.map(\.pid) == [worker.pid] && Self.delivered(report, h.bundle) == published
        }
        #expect(worker.isRunning)
        #expect(try await Self.http("GET", port, "/health").status == 200)
        let answer = try await Self.http("GET", port, "/api/fleet")
        let report = try FleetJSON.decoder.decode(FleetReport.self, from: Data(answer.body.utf8))
        let dropped = try #require(report.dropped)
        #expect(dropped.ignored >= 9, "ignored: \(dropped)")
        #expect(dropped.instances >= 1, "instances turned away: \(dropped)")
        #expect(report.instances.allSatisfy { $0.isWellFormed })
        #expect(!report.paused.contains { $0.hasPrefix(h.bundle) })
        // Said once per kind, not once per forged message.
        #expect(worker.log.components(separatedBy: "not a well-formed fleet message").count == 2)
        #expect(worker.log.components(separatedBy: "a new instance was not kept").count == 2)
        // The forged instances leave the view by themselves (the next fleet tests need room).
        try await waitUntil("the forged instances forgotten", timeout: .seconds(120), every: .seconds(1)) {
            let answer = try await Self.http("GET", port, "/api/fleet")
            return try !FleetJSON.decoder.decode(FleetReport.self, from: Data(answer.body.utf8)).instances.contains { $0.host == "forger" }
        }
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        await h.shutdown()
    }
}
