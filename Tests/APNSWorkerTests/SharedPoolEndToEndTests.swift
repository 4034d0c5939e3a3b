import APNSModel
import APNSSimulator
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// Shared pools through the real broker, a real `apns-worker run` and the simulator: bundles of one
/// team key share one connection pool (the simulator counts the connections), and a fault of
/// one bundle's topic holds that bundle alone while the pool carries on for the others.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct SharedPoolEndToEndTests {
    /// Delivered apns-ids of `bundle`.
    static func delivered(_ h: WorkerHarness, _ bundle: String) -> Set<String> {
        Set(h.simulator.accepted().filter { $0.topic == bundle }.map { $0.apnsID.lowercased() })
    }

    /// `/api/status`'s pools: name → (bundles, connections by state).
    static func pools(_ port: Int) async throws -> [String: (bundles: [String], connections: [String: Int])] {
        let answer = try await FleetEndToEndTests.http("GET", port, "/api/status")
        #expect(answer.status == 200)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any])
        let pools = try #require(json["pools"] as? [[String: Any]], "no pools in \(answer.body)")
        var byName: [String: (bundles: [String], connections: [String: Int])] = [:]
        for pool in pools {
            let name = try #require(pool["name"] as? String)
            byName[name] = (pool["bundles"] as? [String] ?? [], pool["connections"] as? [String: Int] ?? [:])
        }
        return byName
    }

    /// Two bundles of one team, `connections = 2`: one pool per environment, both bundles on
    /// each, `idle` (and `/ready` 200) until the first job; after a job of each, two connections
    /// to Apple, not two per bundle, and the other environment's pool still idle.
    @Test func twoBundlesOfOneTeamShareOnePool() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let port = try await FleetEndToEndTests.adminPort(worker)
        try await waitUntil("the worker ready") { try await FleetEndToEndTests.http("GET", port, "/ready").status == 200 }
        let before = try await Self.pools(port)
        #expect(before.count == 2, "a pool per environment: \(before.keys)")
        for (name, pool) in before {
            #expect(pool.bundles == h.bundles.sorted(), "\(name)")
            #expect(pool.connections["idle"] == 2 && pool.connections["ready"] == 0, "\(name): \(pool.connections)")
        }
        #expect(h.simulator.counters().connections == 0, "nothing connects before a job needs it")
        var ids: [String: String] = [:]
        for (index, bundle) in h.bundles.enumerated() {
            ids[bundle] = try await h.publishJob(token: WorkerHarness.token(index), bundle: bundle).uuidString.lowercased()
        }
        try await waitUntil("a job delivered for each bundle") {
            h.bundles.allSatisfy { Self.delivered(h, $0).contains(ids[$0]!) }
        }
        try await waitUntil("the pool's two connections open") { h.simulator.counters().openConnections >= 2 }
        #expect(h.simulator.counters().connections == 2, "one pool of 2 connections for both bundles")
        // One pool per environment for both bundles.
        #expect(worker.log.components(separatedBy: "connection pool made").count - 1 == 2, "\(worker.log)")
        try await waitUntil("the production pool's two connections ready") {
            try await Self.pools(port).first { $0.key.contains(" production ") }?.value.connections["ready"] == 2
        }
        let sandbox = try #require(try await Self.pools(port).first { $0.key.contains(" sandbox ") }?.value)
        #expect(sandbox.connections["idle"] == 2, "\(sandbox.connections)")
        #expect(try await FleetEndToEndTests.http("GET", port, "/ready").status == 200)
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        #expect(h.simulator.counters().connections == 2)
        await h.shutdown()
    }

    /// One topic of the shared pool's team is not the team's (`TopicDisallowed`): that bundle is
    /// held (its jobs wait in the broker, none dead), the other goes on delivering through the
    /// same connections, before and during the hold.
    @Test func aTopicDisallowedHoldsOnlyItsBundleOnASharedPool() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        options.simulatorDisallowsLastBundles = 1
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let (good, refused) = (h.bundles[0], h.bundles[1])
        let worker = try h.startWorker()
        defer { worker.kill9() }
        for n in 0..<5 {
            try await h.publishJob(token: WorkerHarness.token(100 + n), bundle: refused)
        }
        try await waitUntil("the refused bundle held") { worker.log.contains("bundle HELD") }
        var goodIDs: Set<String> = []
        for n in 0..<20 {
            goodIDs.insert(try await h.publishJob(token: WorkerHarness.token(n), bundle: good).uuidString.lowercased())
        }
        try await waitUntil("every job of the other bundle delivered while its neighbour is held") {
            goodIDs.isSubset(of: Self.delivered(h, good))
        }
        let held = worker.log.split(separator: "\n").filter { $0.contains("bundle HELD") }
        #expect(held.count == 1, "one hold, of one bundle: \(held)")
        #expect(held.allSatisfy { $0.contains(refused) && !$0.contains(good) })
        #expect(held.first?.contains("TopicDisallowed") == true)
        try await waitUntil("the refused bundle's jobs back in the broker") {
            try await h.messageCount(TopologyNames.workQueue(refused)) == 5
        }
        #expect(try await h.messageCount(TopologyNames.deadQueue(refused)) == 0)
        #expect(try await h.messageCount(TopologyNames.deadQueue(good)) == 0)
        #expect(h.simulator.counters().connections <= 2, "both bundles on one pool")
        await h.shutdown()
    }

    /// Apple refuses the team's provider token: each bundle of the shared pool is held and
    /// probes on its own (one loud line each), and each resumes by itself once the token is
    /// accepted again; no job is lost or dead.
    @Test func aRefusedTokenOnASharedPoolHoldsAndResumesEachBundleOnItsOwn() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        h.simulator.setFaults(SimulatorFaults(rejectAllTokens: .invalidProviderToken))
        let worker = try h.startWorker()
        defer { worker.kill9() }
        var ids: [String: Set<String>] = [:]
        for (index, bundle) in h.bundles.enumerated() {
            for n in 0..<5 {
                ids[bundle, default: []].insert(
                    try await h.publishJob(token: WorkerHarness.token(index * 100 + n), bundle: bundle).uuidString.lowercased())
            }
        }
        try await waitUntil("both bundles held") {
            let held = worker.log.split(separator: "\n").filter { $0.contains("bundle HELD") }
            return h.bundles.allSatisfy { bundle in held.contains { $0.contains(bundle) } }
        }
        #expect(worker.log.components(separatedBy: "bundle HELD").count - 1 == 2, "one loud line per bundle")
        h.simulator.setFaults(.none)
        try await waitUntil("every job of both bundles delivered after the token is accepted") {
            h.bundles.allSatisfy { ids[$0]!.isSubset(of: Self.delivered(h, $0)) }
        }
        // The resume is logged once the probe's 200 is back, after the simulator counted the
        // probe's job: when the probe was a bundle's last job to be accepted (the others were
        // already in flight as the token came good again), that is after the wait above.
        try await waitUntil("each bundle's resume logged: \(worker.log)") {
            let resumed = worker.log.split(separator: "\n").filter { $0.contains("bundle resumed") }
            return h.bundles.allSatisfy { bundle in resumed.contains { $0.contains(bundle) } }
        }
        for bundle in h.bundles {
            #expect(try await h.messageCount(TopologyNames.deadQueue(bundle)) == 0)
        }
        #expect(h.simulator.counters().connections <= 2, "both bundles on one pool")
        await h.shutdown()
    }
}
