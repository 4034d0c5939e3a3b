import AMQPClient
import APNSFleet
import Foundation

/// This instance's bundles as the fleet sees them (`FleetService`): what it reports in its
/// heartbeat and what a pause marker switches. `WorkerService` in production; a test gives a
/// stand-in, so the fleet's logic runs without pipelines.
public protocol FleetMember: WorkerStatusProviding {
    /// The bundles this instance consumes.
    var bundleIDs: [String] { get }
    /// Pauses or resumes a bundle's consumption; true when that changed something (false for
    /// a bundle this instance does not consume).
    func setPaused(_ bundleID: String, _ paused: Bool) -> Bool
    /// When the newest job this instance took of the bundle was published (contract §5).
    func lastTakenPublishedAt(_ bundleID: String) -> Date?
}

extension WorkerService: FleetMember {
    public var bundleIDs: [String] { pipelines.map(\.settings.bundleID) }

    public func setPaused(_ bundleID: String, _ paused: Bool) -> Bool {
        pipeline(bundleID)?.setPaused(paused) ?? false
    }

    public func lastTakenPublishedAt(_ bundleID: String) -> Date? {
        pipeline(bundleID)?.lastTakenPublishedAt
    }

    func pipeline(_ bundleID: String) -> BundlePipeline<Broker>? {
        pipelines.first { $0.settings.bundleID == bundleID }
    }
}

/// The fleet as the admin server sees it (`FleetService`): the report, the view behind the
/// page's graph, and fleet-wide pause and resume.
public protocol FleetOperating: Sendable {
    var identity: FleetIdentity { get }
    /// The wall-clock time of the fleet's own clock, the one its view is kept on (heartbeats
    /// heard, instances expired): what is live is asked at this time.
    var wallTime: Date { get }
    func report(now: Date) -> FleetReport
    /// One page of `GET /api/fleet`.
    func page(_ request: FleetPage.Request, now: Date) -> FleetPage
    /// The graph's points, fleet-wide.
    func series(now: Date) -> [FleetRates.Point]
    func snapshot() -> FleetView
    func setPaused(_ bundleID: String, _ paused: Bool) async throws
}

extension FleetOperating {
    public func report() -> FleetReport { report(now: wallTime) }
}

extension FleetService: FleetOperating {}
