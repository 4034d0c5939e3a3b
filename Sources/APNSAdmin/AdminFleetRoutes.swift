/// The admin routes of the fleet (contract §5) and of the page's job actions: `GET /api/fleet`,
/// pause and resume (`POST /api/bundles/{bundleId}/pause|resume` and the page's forms), the
/// live graph's frame and SVG, purging one job, and bulk requeue or purge with a confirmation
/// step. Every POST passes `AdminAuthentication` (token, and no cross-site requests).
import APNSAdminQuery
import APNSFleet
import APNSTopology
import APNSOperations
import APNSWorker
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Mustache
import NIOCore

struct AdminFleetRoutes: Sendable {
    let routes: AdminRoutes

    /// How often the graph's frame reloads itself.
    static let graphRefreshSeconds = 5

    var fleet: (any FleetOperating)? { routes.fleet }

    func register(on router: Router<BasicRequestContext>) {
        router.get("/api/fleet") { request, _ -> Response in
            guard let fleet else { return AdminRoutes.error(.serviceUnavailable, "the fleet service is not running") }
            let pageRequest: FleetPage.Request
            do {
                pageRequest = try AdminQuery.fleetPage(QueryOptions.pairs(request.uri.queryParameters))
            } catch {
                return AdminRoutes.error(.badRequest, "\(error)")
            }
            // A page, not the whole view: a forged view's every bundle as one JSON passed the
            // deployment's memory limit; `next` leads to the rest.
            var headers = HTTPFields()
            headers[.contentType] = "application/json"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: fleet.page(pageRequest, now: fleet.wallTime).body)))
        }
        for (action, paused) in [("pause", true), ("resume", false)] {
            router.post("/api/bundles/:bundleId/\(action)") { _, context -> Response in
                let bundleID = try Self.bundleID(context)
                return await self.setPaused(bundleID, paused) { AdminRoutes.json(["bundleId": bundleID, "paused": paused ? "true" : "false"]) }
            }
            router.post("/bundles/:bundleId/\(action)") { _, context -> Response in
                let bundleID = try Self.bundleID(context)
                return await self.setPaused(bundleID, paused) { Response(status: .seeOther, headers: [.location: "/"]) }
            }
        }
        router.get("/fleet/graph") { _, _ -> Response in
            AdminRoutes.html(self.graph().document(refresh: Self.graphRefreshSeconds))
        }
        router.get("/fleet/graph.svg") { _, _ -> Response in
            var headers = HTTPFields()
            headers[.contentType] = "image/svg+xml"
            headers[.cacheControl] = "no-store"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: self.graph().svg())))
        }
        for kind in JobQueueKind.allCases {
            router.post("/\(kind.rawValue)/:jobID/purge") { _, context -> Response in
                try await routes.withQueues { queues in
                    let jobID = try AdminRoutes.jobID(context)
                    let report = try await queues.purge(kind, .jobIDs([jobID]))
                    routes.logger.info("job purged from the admin page", metadata: ["job.id": "\(jobID)", "operations.purged": "\(report.purged)"])
                    return Response(status: .seeOther, headers: [.location: "/"])
                }
            }
            router.get("/\(kind.rawValue)/confirm") { request, _ -> Response in
                try await routes.withQueues { queues in
                    let (action, filter) = try Self.bulkRequest(request)
                    // From the queues' depths, not a listing: counting by reading every message
                    // would hold whole queues in the worker. With a reason or age, the depth is
                    // what the move will look through, and an upper bound of what it moves.
                    let depth = try await queues.readyCount(kind, bundleID: filter.bundleID)
                    let count = filter.selectsWholeQueues ? "\(depth)" : "up to \(depth)"
                    var selection = [filter.bundleID.map { "bundle \($0)" } ?? "every bundle"]
                    if let reason = filter.reason { selection.append("reason \(reason)") }
                    let context: [String: Any] = [
                        "verb": action == "purge" ? "Purge" : "Requeue", "count": count, "kind": kind.rawValue,
                        "selection": selection.joined(separator: ", "), "purge": action == "purge",
                        "actionPath": StatusPage.path("/bulk/\(kind.rawValue)/\(action)", ["bundle": filter.bundleID, "reason": filter.reason]),
                    ]
                    return AdminRoutes.html(Templates.library.render(context, withTemplate: "confirm") ?? "")
                }
            }
            for action in ["requeue", "purge"] {
                router.post("/bulk/\(kind.rawValue)/\(action)") { request, _ -> Response in
                    try await routes.withQueues { queues in
                        let filter = try QueryOptions.bulkFilter(request.uri.queryParameters)
                        if action == "purge" {
                            let report = try await queues.purge(kind, .all(filter))
                            routes.logger.notice("jobs purged from the admin page", metadata: ["operations.kind": "\(kind.rawValue)", "operations.purged": "\(report.purged)"])
                        } else {
                            let report = try await queues.requeue(kind, .all(filter))
                            routes.logger.notice("jobs requeued from the admin page", metadata: ["operations.kind": "\(kind.rawValue)", "operations.moved": "\(report.moved)"])
                        }
                        return Response(status: .seeOther, headers: [.location: "/"])
                    }
                }
            }
        }
    }

    /// The fleet-wide series only (`FleetRates` keeps it as the work is recorded): what the graph
    /// costs does not grow with the bundles the view holds.
    func graph() -> FleetGraph {
        FleetGraph(points: fleet.map { $0.series(now: $0.wallTime) } ?? FleetRates().series(now: Date()))
    }

    func setPaused(_ bundleID: String, _ paused: Bool, answer: () -> Response) async -> Response {
        guard let fleet else { return AdminRoutes.error(.serviceUnavailable, "the fleet service is not running") }
        do {
            try await fleet.setPaused(bundleID, paused)
        } catch {
            routes.logger.warning("could not pause or resume a bundle", metadata: ["apns.bundle": "\(bundleID)", "amqp.error": "\(error)"])
            return AdminRoutes.error(.serviceUnavailable, "broker: \(error)")
        }
        routes.logger.notice(
            paused ? "bundle paused fleet-wide from the admin server" : "bundle resumed fleet-wide from the admin server",
            metadata: ["apns.bundle": "\(bundleID)"])
        return answer()
    }

    /// The `:bundleId` segment, percent-decoded; a bundle ID is a reverse-DNS name, so anything
    /// else (empty, a slash, spaces, over 200 bytes) is refused rather than made into a queue name.
    static func bundleID(_ context: some RequestContext) throws -> String {
        let raw = try context.parameters.require("bundleId")
        let id = raw.removingPercentEncoding ?? raw
        guard FleetTopology.isPausable(id) else { throw HTTPError(.badRequest, message: "not a bundle ID") }
        return id
    }

    /// `action` (requeue or purge) and the selection of a bulk confirmation.
    static func bulkRequest(_ request: Request) throws -> (String, JobFilter) {
        let (action, selection) = try AdminQuery.bulkConfirmation(QueryOptions.pairs(request.uri.queryParameters))
        return (action, QueryOptions.filter(selection))
    }
}
