import AMQPClient
import APNSFleet
import APNSTopologyNames
import APNSWorker
import Foundation
import Testing
import TestSupport

/// Contract §5 on the real broker, against what anyone on the vhost can publish on `apns.fleet`:
/// `GET /api/fleet`'s `paused` is the state kept on the broker (the pause markers), not what
/// heartbeats say; and what waits to be read by the listener is bounded by its prefetch, however
/// many heartbeats are published. One of the serialized fleet suites.
extension FleetEndToEndTests {
    /// The bound is the prefetch the broker holds the listener to: at most 16 heartbeats of at
    /// most 64 KiB are sent before one is acked, 1 MiB (it was 100: 6.25 MiB; docs/benchmarks.md,
    /// "Forged heartbeats: the listener's window").
    @Test func theListenerIsSentAtMostOneMiBOfHeartbeatsAtOnce() async throws {
        #expect(Int(FleetControl.listenerPrefetch) * FleetMessage.maxBodyBytes <= 1 << 20)
        let h = try await Self.harness()
        let worker = try h.startWorker("worker")
        defer { worker.kill9() }
        let port = try await Self.adminPort(worker)
        var instanceID = ""
        try await waitUntil("the worker in its own fleet view") {
            instanceID = try await Self.wholeFleet(port).instances.first { $0.pid == worker.pid }?.id ?? ""
            return !instanceID.isEmpty
        }
        let queue = TopologyNames.fleetQueue(instanceID: instanceID)
        var prefetch: [Int] = []
        try await waitUntil("the listener's consumer in the management API") {
            let consumers = try await h.broker.managementJSON("/consumers") as? [[String: Any]] ?? []
            prefetch = consumers.filter { ($0["queue"] as? [String: Any])?["name"] as? String == queue }.compactMap { $0["prefetch_count"] as? Int }
            return !prefetch.isEmpty
        }
        #expect(prefetch == [Int(FleetControl.listenerPrefetch)])
        await h.shutdown()
    }

    @Test func bundlesAForgedHeartbeatCallsPausedAreListedOnlyWhenTheirMarkerSaysSo() async throws {
        let h = try await Self.harness()
        let worker = try h.startWorker("worker")
        defer { worker.kill9() }
        let port = try await Self.adminPort(worker)
        try await waitUntil("the worker in its own fleet view") { try await Self.fleet(port, bundle: h.bundle).instances.count == 1 }

        // A forged instance that calls the worker's own bundle and another one paused.
        let elsewhere = uniqueName("forged.paused")
        var forged = Self.forged("forger-paused", delivered: 1, bundle: h.bundle)
        forged.bundles[h.bundle]?.paused = true
        forged.bundles[elsewhere] = FleetInstance.Bundle(delivered: 1, paused: true)
        let heartbeat = FleetMessage.heartbeat(forged).encoded()
        let forge = { try await Self.forge(h, heartbeat) }
        try await waitUntil("the forged instance heard") {
            try await forge()
            return try await Self.wholeFleet(port).instances.contains { $0.id == "forger-paused" }
        }
        // Several of the worker's beats (1 s each) with the forger still heard: neither bundle
        // paused. Only these two are looked at: the fleet is the broker's, and tests running
        // beside this one pause their own bundles for real.
        let ours = [h.bundle, elsewhere]
        for _ in 0..<4 {
            try await forge()
            try await Task.sleep(for: .seconds(1))
            let report = try await Self.wholeFleet(port)
            #expect(report.instances.contains { $0.id == "forger-paused" && $0.bundles[h.bundle]?.paused == true })
            #expect(!report.paused.contains { ours.contains($0) }, "paused by a forged heartbeat: \(report.paused)")
        }
        #expect(try await !FleetControl.isPaused(h.bundle, on: h.connection))

        // Paused for real (its marker), the bundle an instance reports paused is listed, though
        // this worker does not run it; resumed, it is not.
        try await FleetControl.pause(elsewhere, on: h.connection)
        try await waitUntil("the real pause listed") {
            try await forge()
            return try await Self.wholeFleet(port).paused.filter { ours.contains($0) } == [elsewhere]
        }
        try await FleetControl.resume(elsewhere, on: h.connection)
        try await waitUntil("the resume listed") {
            try await forge()
            return try await !Self.wholeFleet(port).paused.contains { ours.contains($0) }
        }
        #expect(worker.isRunning)
        await h.shutdown()
    }
}
