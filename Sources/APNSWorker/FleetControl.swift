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

    /// Reads the bundle's pause marker, the truth of a fleet-wide pause (contract §5), and
    /// pauses or resumes the bundle's consumption to match, with a notice when that changed it:
    /// the one stored-pause check of the worker's start, its new units and the fleet's beats.
    /// `admit` sees what was read before it is applied and may refuse it (a newer read of the
    /// same marker overtook it: `FleetService.reconcile`).
    static func followMarker(
        of bundleID: String, on broker: some TopologyDeclaring, logger: Logger,
        admit: (_ paused: Bool) -> Bool = { _ in true }, setPaused: (_ paused: Bool) -> Bool
    ) async throws {
        let paused = try await isPaused(bundleID, on: broker)
        guard admit(paused), setPaused(paused) else { return }
        if paused {
            logger.notice("bundle PAUSED by an operator: its jobs wait in the broker", metadata: ["apns.bundle": "\(bundleID)"])
        } else {
            logger.notice("bundle resumed by an operator", metadata: ["apns.bundle": "\(bundleID)"])
        }
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
    /// view heard so far satisfies it (`duration` is then a deadline). The paused bundles are read
    /// from their markers, for the bundles `pauseChecks` picks.
    public static func listen(
        on broker: some MessageConsuming & TopologyDeclaring, for duration: Duration, bundleIDs: [String],
        logger: Logger? = nil, until: (@Sendable (FleetView) -> Bool)? = nil
    ) async throws -> FleetReport {
        let id = "cli-\(UUID().uuidString.prefix(8).lowercased())"
        try await broker.declare(FleetTopology.plan(instanceID: id, messageTTL: .seconds(60)))
        let consumer = try await broker.consume(
            queue: TopologyNames.fleetQueue(instanceID: id), prefetch: listenerPrefetch, maxBodySize: FleetMessage.maxBodyBytes)
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
        let live = view.live(now: now)
        let checks = pauseChecks(configured: bundleIDs, live: live)
        var paused: [String] = []
        for bundleID in checks.bundleIDs where try await isPaused(bundleID, on: broker) {
            paused.append(bundleID)
        }
        if checks.leftOut > 0 {
            logger?.warning(
                "fleet: the heartbeats name more bundles than are checked for a pause; the rest are not listed as paused",
                metadata: ["fleet.checked": "\(checks.bundleIDs.count)", "fleet.left_out": "\(checks.leftOut)"])
        }
        return FleetReport(instances: live, paused: paused.sorted(), dropped: view.dropped)
    }

    /// The heartbeats a listener is sent before it acks one: what waits to be read (in the
    /// consumer's buffer, each with its copy being decoded) is at most this many bodies of at
    /// most `FleetMessage.maxBodyBytes`, 1 MiB, however many are published; the view keeps at
    /// most `FleetView.maxBytes` (16 MiB). It was 100: 6.25 MiB of bodies waiting under a flood
    /// of forged heartbeats (docs/benchmarks.md, "Forged heartbeats: the listener's window").
    /// An honest fleet of 1,000 instances sends 200 a second at the default interval; each is
    /// decoded and acked in microseconds, far within this window.
    public static let listenerPrefetch: UInt16 = 16

    /// At most this many pause markers are read for one report: each is a broker round trip.
    public static let maxPauseChecks = 1_000

    /// The bundles whose pause marker a report reads, and how many named ones it leaves out.
    /// Heartbeats are anyone's to forge (contract §4): a bundle key that could not name a marker
    /// (a queue name is at most 255 bytes; `isPausable`) is not one to check, and a flood of
    /// valid-looking names must not make the report a million broker round trips. The configured
    /// bundles come first, then those a live instance says are paused, then the rest by name.
    public static func pauseChecks(configured: [String], live: [FleetInstance]) -> (bundleIDs: [String], leftOut: Int) {
        var reportedPaused = Set<String>()
        var seen = Set<String>()
        for instance in live {
            for (bundleID, bundle) in instance.bundles where FleetTopology.isPausable(bundleID) {
                seen.insert(bundleID)
                if bundle.paused { reportedPaused.insert(bundleID) }
            }
        }
        var chosen: [String] = []
        var taken = Set<String>()
        let candidates = configured.filter(FleetTopology.isPausable) + reportedPaused.sorted() + seen.sorted()
        for bundleID in candidates where taken.insert(bundleID).inserted {
            chosen.append(bundleID)
        }
        let kept = Array(chosen.prefix(maxPauseChecks))
        return (kept, chosen.count - kept.count)
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
