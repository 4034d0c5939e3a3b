import AMQPClient
import APNSFleet
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging

/// The fleet's broker operations shared by the worker, the admin server and the CLI: pause and
/// resume a bundle (the durable marker, then the control message), test for a pause, and hear
/// the fleet's heartbeats for a while (`apns-worker fleet`).
public enum FleetControl {
    /// Pauses a bundle fleet-wide: the durable marker first, so an instance that starts or
    /// reconciles after this sees it, then the control message that makes the running ones stop
    /// at once.
    public static func pause(_ bundleID: String, on broker: some TopologyDeclaring & ConfirmedPublishing) async throws {
        try await broker.declareQueue(FleetTopology.pauseMarker(bundleID))
        try await broker.declareExchange(FleetTopology.exchange)
        try await broker.publish(control(.pause(bundleID: bundleID)))
    }

    /// Resumes a bundle fleet-wide: removes the marker, then tells the running instances.
    public static func resume(_ bundleID: String, on broker: some TopologyDeclaring & ConfirmedPublishing) async throws {
        try await broker.deleteQueue(TopologyNames.pauseMarker(bundleID), ifUnused: false, ifEmpty: false)
        try await broker.declareExchange(FleetTopology.exchange)
        try await broker.publish(control(.resume(bundleID: bundleID)))
    }

    /// Whether the bundle's pause marker exists (a passive declare).
    public static func isPaused(_ bundleID: String, on broker: some TopologyDeclaring) async throws -> Bool {
        try await broker.queueExists(TopologyNames.pauseMarker(bundleID))
    }

    static func control(_ message: FleetMessage) -> AMQPOutboundMessage {
        // Not mandatory: with no instance listening there is nobody to tell, and the marker holds.
        AMQPOutboundMessage(
            exchange: TopologyNames.fleetExchange, routingKey: "", body: message.encoded(),
            properties: AMQPProperties(contentType: "application/json", deliveryMode: 1), mandatory: false)
    }

    /// Listens on the fleet exchange for `duration` (at least one heartbeat interval, so every
    /// live instance speaks once) and returns what was heard, with the paused bundles among
    /// `bundleIDs` and the bundles the instances reported. With `until`, it stops as soon as the
    /// view heard so far satisfies it (`duration` is then a deadline).
    public static func listen(
        on broker: some MessageConsuming & TopologyDeclaring, for duration: Duration, bundleIDs: [String],
        until: (@Sendable (FleetView) -> Bool)? = nil
    ) async throws -> FleetReport {
        let id = "cli-\(UUID().uuidString.prefix(8).lowercased())"
        try await broker.declare(FleetTopology.plan(instanceID: id, messageTTL: .seconds(60)))
        let consumer = try await broker.consume(
            queue: TopologyNames.fleetQueue(instanceID: id), prefetch: 200, maxBodySize: FleetMessage.maxBodyBytes)
        var view = FleetView()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                do { try await Task.sleep(for: duration) } catch { return }  // ended early (`until`)
                await consumer.cancel()
            }
            for try await delivery in consumer {
                switch FleetMessage.decode(delivery.message.body) {
                case .heartbeat(let instance): view.received(instance, at: Date())
                case .pause, .resume: break
                case nil: view.ignoredMessage()
                }
                await broker.ack(delivery)
                if let until, until(view) { break }
            }
            group.cancelAll()
            await consumer.cancel()
            try await group.waitForAll()
        }
        let now = Date()
        let seen = Set(view.live(now: now).flatMap(\.bundles.keys))
        var paused: [String] = []
        for bundleID in Set(bundleIDs).union(seen).sorted() where try await isPaused(bundleID, on: broker) {
            paused.append(bundleID)
        }
        return FleetReport(instances: view.live(now: now), paused: paused, dropped: view.dropped)
    }
}

/// `GET /api/fleet` and `apns-worker fleet --json` (contract §5).
public struct FleetReport: Sendable, Hashable, Codable {
    public var instances: [FleetInstance]
    /// Bundles paused fleet-wide, sorted.
    public var paused: [String]
    /// What the listener's view did not keep (contract §5: it says when it drops any): new
    /// instances past 1,000, bundles past 1,000 of one instance, messages not well formed.
    /// Optional so that an answer of an older version still decodes.
    public var dropped: FleetDrops?
    /// `GET /api/fleet` is paged (`FleetPage`): the `after` of the next page, absent on the last.
    public var next: String?

    public init(instances: [FleetInstance], paused: [String], dropped: FleetDrops? = nil, next: String? = nil) {
        self.instances = instances
        self.paused = paused
        self.dropped = dropped
        self.next = next
    }
}
