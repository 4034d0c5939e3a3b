import AMQPClient
import APNSFleet
import APNSModel
import APNSTopologyNames
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
        // A ten-second interval: the forged instances leave every view within 30 s. The flood
        // beats in rounds until a view turned one away, so this bounds only how slow a listener
        // may be (1,100 heartbeats in 30 s), not how long the test waits.
        FleetInstance(
            id: id, host: "forger", pid: 1, version: "6.6.6", startedAt: Date(), rssBytes: 1, cpuSeconds: 0, broker: "connected",
            heartbeatInterval: 10, bundles: [bundle: FleetInstance.Bundle(delivered: delivered)])
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
        // `apns-worker fleet` reads the pause markers of the bundles heartbeats name: a key longer
        // than a queue name allows lost its connection ("invalid AMQP data") and failed the
        // command. Forged while the command listens (it hears only what comes after it starts).
        let overlong = "forged." + String(repeating: "x", count: FleetInstance.maxBundleKeyBytes - 7)
        // A listen that heard no beat of the worker's (late on a loaded machine) is tried again.
        var heard: [Int32] = []
        try await waitUntil("apns-worker fleet to hear the worker among the forgeries: \(heard)", timeout: .seconds(90)) {
            async let cliReport = Self.fleetCommand(h, wait: "4s")
            for _ in 0..<6 {
                try await Task.sleep(for: .milliseconds(500))
                try await Self.forge(h, FleetMessage.heartbeat(Self.forged("forger-long", delivered: 1, bundle: overlong)).encoded())
            }
            heard = try await cliReport.instances.map(\.pid)
            return !heard.isEmpty
        }
        #expect(heard == [worker.pid])

        // More instances than a view keeps, in rounds until the worker's view turned one away: a
        // single round on a loaded machine was heard so slowly that its first forgeries were
        // forgotten before its last arrived, and nothing was turned away.
        try await waitUntil("the full view to turn a forged instance away", timeout: .seconds(180)) {
            for n in 0..<(FleetView.maxInstances + 100) {
                try await Self.forge(h, FleetMessage.heartbeat(Self.forged("flood-\(n)", delivered: n)).encoded())
            }
            let answer = try await Self.http("GET", port, "/api/fleet")
            return try (FleetJSON.decoder.decode(FleetReport.self, from: Data(answer.body.utf8)).dropped?.instances ?? 0) >= 1
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
            try await !Self.wholeFleet(port).instances.contains { $0.host == "forger" }
        }
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        await h.shutdown()
    }

    /// On the real broker: forged heartbeats alternating every count between 0
    /// and 2^53 over 1,000 bundles (four forgers of 250, each heartbeat within 64 KiB) made one
    /// bucket's sum pass `Int.max`, and `/fleet/graph` (the page reloads it every 5 s) trapped
    /// the worker. The graph draws the capped rate and the worker lives.
    @Test func forgedRatesAtTheirBoundsDrawTheGraphInsteadOfKillingTheWorker() async throws {
        let h = try await Self.harness()
        let worker = try h.startWorker("worker")
        defer { worker.kill9() }
        let port = try await Self.adminPort(worker)
        try await waitUntil("the worker in its own fleet view") { try await Self.fleet(port, bundle: h.bundle).instances.count == 1 }
        // 25 beats of each forger: 12 rises, so that one bucket holds at least 6 even when the
        // beats straddle two (6 rises × 1,000 bundles × 2^53 / 10 s is past what `Int` holds).
        for beat in 0..<25 {
            let count = beat.isMultiple(of: 2) ? 0 : UntrustedText.maxCount
            let bundle = FleetInstance.Bundle(delivered: count, invalidToken: count, retry: count, dead: count)
            for forger in 0..<4 {
                let instance = FleetInstance(
                    id: "rate-forger-\(forger)", host: "forger", pid: 1, version: "6.6.6", startedAt: Date(), rssBytes: 1, cpuSeconds: 0,
                    broker: "connected", heartbeatInterval: 10,
                    bundles: Dictionary(uniqueKeysWithValues: (0..<250).map { (String(format: "f%d.%03d", forger, $0), bundle) }))
                let body = FleetMessage.heartbeat(instance).encoded()
                #expect(body.count <= FleetMessage.maxBodyBytes)
                try await Self.forge(h, body)
            }
        }
        // The forgeries' bucket is drawn once it is complete (within 10 s): the capped rate,
        // 2^53 jobs/s, under an axis topped at 10^16.
        try await waitUntil("the capped rate on /fleet/graph", timeout: .seconds(60)) {
            let answer = try await Self.http("GET", port, "/fleet/graph")
            return answer.status == 200 && answer.body.contains(">10000000000000000/s</text>")
        }
        #expect(worker.isRunning)
        #expect(try await Self.http("GET", port, "/fleet/graph.svg").status == 200)
        #expect(try await Self.http("GET", port, "/").status == 200)
        #expect(try await Self.http("GET", port, "/health").status == 200)
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        await h.shutdown()
    }
}

