/// Pause and resume messages on `apns.fleet` come from anyone who may publish on the vhost; each
/// makes the instance read the bundle's pause marker (a passive declare). The
/// listener no longer waits for that read, and messages that arrive while a read is under way
/// share one read after it, so a flood costs a round trip per bundle, not per message.
import AMQPClient
import APNSFleet
import APNSTopologyNames
import APNSTopology
import Foundation
import Logging
import Synchronization
import Testing
import TestSupport

@testable import APNSWorker

@Suite struct FleetPauseFloodTests {
    /// Counts the marker reads and, once `holding`, holds each until `released`.
    final class MarkerReads: Sendable {
        let marker: String
        private let state = Mutex((count: 0, holding: false, released: false))
        init(marker: String) { self.marker = marker }

        var count: Int { state.withLock { $0.count } }
        func hold() { state.withLock { $0.holding = true } }
        func release() { state.withLock { $0.released = true } }

        func read(_ name: String) async {
            guard name == marker else { return }
            let held = state.withLock { state in
                state.count += 1
                return state.holding
            }
            guard held else { return }
            while !state.withLock({ $0.released }) { try? await Task.sleep(for: .milliseconds(5)) }
        }
    }

    @Test func aFloodOfPauseMessagesNeitherStallsTheListenerNorCostsAReadEach() async throws {
        let bundle = "com.example.flooded"
        let broker = InMemoryBroker()
        let reads = MarkerReads(marker: TopologyNames.pauseMarker(bundle))
        broker.onInspect = { await reads.read($0) }
        let member = StubFleetMember(bundleIDs: [bundle])
        var logger = Logger(label: "fleet-flood-tests")
        logger.logLevel = .critical
        // One heartbeat interval for the whole test: the periodic reconcile runs once, at start.
        let fleet = FleetService(
            broker: broker, worker: member,
            identity: FleetIdentity(instanceID: "host-1-flood", host: "host", pid: 1, version: "test", startedAt: Date()),
            interval: .seconds(3600), logger: logger)
        let running = Task { try await fleet.run() }
        defer { running.cancel() }
        try await waitUntil("the fleet consumer and the first reconcile") { broker.consumerCount == 1 && reads.count == 1 }

        // The read the first message asks for is held; meanwhile the flood arrives.
        reads.hold()
        try await FleetControl.pause(bundle, on: broker)
        try await waitUntil("the read the first message asked for") { reads.count == 2 }
        let flood = 1_000
        for _ in 1..<flood { try await broker.publish(FleetControl.control(.pause(bundleID: bundle))) }
        let pauses = { broker.settled.filter { FleetMessage.decode($0.body) == .pause(bundleID: bundle) }.count }
        // Before: the listener waited for each read, so it stopped at the first message.
        try await waitUntil("the listener took every pause message while a marker read was held") { pauses() == flood }
        #expect(reads.count == 2)

        reads.release()
        try await waitUntil("the bundle paused") { member.pausedBundles == [bundle] }
        // The 999 messages that came during the held read share one read after it.
        try await waitUntil("the read after the held one") { reads.count >= 3 }
        #expect(reads.count == 3)
    }
}
