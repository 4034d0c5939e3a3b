/// Every admin route: probes (`/health`, `/ready`), `/metrics`, the JSON API over the worker's
/// status and the dead and retry queues, the HTML page with its requeue forms, and `/login`.
import APNSCore
import APNSOperations
import APNSWorker
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import Mustache
import NIOCore
import Prometheus

struct AdminRoutes: Sendable {
    let worker: any WorkerStatusProviding
    let queues: QueueInspector?
    let registry: PrometheusCollectorRegistry?
    let token: String?
    let logger: Logger
    /// This instance's part in the fleet: heartbeats heard, pause and resume. Nil in tests of
    /// the routes alone; the page then shows this instance only.
    var fleet: FleetService? = nil

    /// Dead jobs the HTML page lists at most (the JSON API lists any number).
    static let pageJobLimit = 100

    func register(on router: Router<BasicRequestContext>) {
        router.get("/health") { _, _ -> Response in Self.text("ok\n") }
        router.get("/ready") { _, _ -> Response in self.ready() }
        router.get("/metrics") { _, _ -> Response in await self.metrics() }
        router.get("/login") { request, _ -> Response in self.login(request) }
        router.get("/api/status") { _, _ -> Response in await self.statusJSON() }
        for kind in JobQueueKind.allCases {
            router.get("/api/\(kind.rawValue)") { request, _ -> Response in
                try await self.withQueues { queues in
                    let (filter, limit) = try QueryOptions.filter(request.uri.queryParameters)
                    let jobs = try await queues.list(kind, filter: filter, limit: limit)
                    return Self.json(JobList(kind: kind.rawValue, count: jobs.count, jobs: jobs))
                }
            }
            router.get("/api/\(kind.rawValue)/:jobID") { request, context -> Response in
                try await self.withQueues { queues in
                    let jobID = try Self.jobID(context)
                    let bundle = request.uri.queryParameters.get("bundle")
                    guard let job = try await queues.show(kind, jobID: jobID, bundleID: bundle) else {
                        return Self.error(.notFound, "no \(kind.rawValue) job with id \(jobID)")
                    }
                    return Self.json(job)
                }
            }
            router.post("/api/\(kind.rawValue)/:jobID/requeue") { _, context -> Response in
                try await self.withQueues { queues in
                    let jobID = try Self.jobID(context)
                    let report = try await queues.requeue(kind, .jobIDs([jobID]))
                    return Self.json(report, status: report.moved == 0 ? .notFound : .ok)
                }
            }
            router.post("/api/\(kind.rawValue)/requeue") { request, _ -> Response in
                try await self.withQueues { queues in
                    let filter = try QueryOptions.bulkFilter(request.uri.queryParameters)
                    return Self.json(try await queues.requeue(kind, .all(filter)))
                }
            }
            router.post("/api/\(kind.rawValue)/purge") { request, _ -> Response in
                try await self.withQueues { queues in
                    guard request.uri.queryParameters.get("confirm") == "yes" else {
                        return Self.error(.badRequest, "purge drops jobs for good: add confirm=yes")
                    }
                    let filter = try QueryOptions.bulkFilter(request.uri.queryParameters, allowing: ["confirm"])
                    return Self.json(try await queues.purge(kind, .all(filter)))
                }
            }
            // The page's requeue buttons: a plain form POST, then back to the page.
            router.post("/\(kind.rawValue)/:jobID/requeue") { _, context -> Response in
                let jobID = try Self.jobID(context)
                guard let queues = self.queues else { return Self.error(.serviceUnavailable, "queue access is not configured") }
                let report = try await queues.requeue(kind, .jobIDs([jobID]))
                self.logger.info("job requeued from the admin page", metadata: ["job.id": "\(jobID)", "operations.moved": "\(report.moved)"])
                return Response(status: .seeOther, headers: [.location: "/"])
            }
        }
        router.get("/") { request, _ -> Response in await self.page(request) }
        AdminFleetRoutes(routes: self).register(on: router)
    }

    /// The `:jobID` path segment, percent-decoded: the router hands it over as sent, and the
    /// page encodes ids that hold characters a path cannot.
    static func jobID(_ context: some RequestContext) throws -> String {
        let raw = try context.parameters.require("jobID")
        return raw.removingPercentEncoding ?? raw
    }

    // MARK: - Probes and metrics

    func ready() -> Response {
        let status = worker.status()
        let body = Readiness(ready: status.isReady, broker: status.broker, heldBundles: status.heldBundles, registry: status.registry)
        return Self.json(body, status: status.isReady ? .ok : .serviceUnavailable)
    }

    func metrics() async -> Response {
        guard let registry else { return Self.error(.serviceUnavailable, "metrics are not bootstrapped") }
        let status = worker.status()
        AdminMetrics.sample(status)
        if queues != nil {
            AdminMetrics.sample(await queueDepths().0, bundleIDs: status.bundles.map(\.bundleID))
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer())))
    }

    func login(_ request: Request) -> Response {
        guard let token else { return Response(status: .seeOther, headers: [.location: "/"]) }
        guard let presented = request.uri.queryParameters.get("token"), AdminAuthentication<BasicRequestContext>.constantTimeEqual(presented, token)
        else { return Self.error(.unauthorized, "wrong or missing token") }
        var headers = HTTPFields()
        headers[.location] = "/"
        headers[.setCookie] = AdminAuthentication<BasicRequestContext>.cookie(token)
        return Response(status: .seeOther, headers: headers)
    }

    // MARK: - Status

    func statusJSON() async -> Response {
        let status = worker.status()
        let (depths, queueError) = await queueDepths()
        let bundles = status.bundles.map { bundle in
            StatusReport.Bundle(
                bundleID: bundle.bundleID, held: bundle.held, jobs: bundle.activity.jobs, perMinute: bundle.activity.perMinute,
                inFlight: bundle.activity.inFlight, connections: bundle.connections,
                queues: depths.map { QueueTotals(depths: $0, bundleID: bundle.bundleID) })
        }
        return Self.json(
            StatusReport(
                ready: status.isReady, broker: status.broker, heldBundles: status.heldBundles, bundles: bundles,
                queueError: queueError))
    }

    /// Queue depths, or why they could not be read (the page and status still answer).
    func queueDepths() async -> ([QueueDepth]?, String?) {
        guard let queues else { return (nil, "queue access is not configured") }
        do {
            return (try await queues.depths(), nil)
        } catch {
            logger.warning("could not read queue depths", metadata: ["amqp.error": "\(error)"])
            return (nil, "\(error)")
        }
    }

    // MARK: - HTML

    /// The page; `?bundle=&reason=` filter its dead jobs. One pooled connection reads the depths
    /// and one short-lived connection lists the retry and dead jobs together (closing it is
    /// what hands them back in order).
    func page(_ request: Request) async -> Response {
        let status = worker.status()
        var (depths, queueError) = await queueDepths()
        var deadJobs: [QueuedJob] = []
        var retryJobs: [QueuedJob] = []
        var deadFilter = JobFilter()
        deadFilter.bundleID = request.uri.queryParameters.get("bundle").flatMap { $0.isEmpty ? nil : $0 }
        deadFilter.reason = request.uri.queryParameters.get("reason").flatMap { $0.isEmpty ? nil : $0 }
        if let queues, queueError == nil {
            do {
                let lists = try await queues.list([
                    (kind: .retry, filter: JobFilter(), limit: Self.pageJobLimit + 1),
                    (kind: .dead, filter: deadFilter, limit: Self.pageJobLimit + 1),
                ])
                retryJobs = lists[0]
                deadJobs = lists[1]
            } catch {
                queueError = "\(error)"
                depths = nil
            }
        }
        let html = StatusPage(
            status: status, fleet: fleet?.report(), fleetView: fleet?.snapshot(), instanceID: fleet?.identity.instanceID,
            depths: depths, retryDelays: queues?.retryDelays ?? [], queueError: queueError, deadJobs: deadJobs, retryJobs: retryJobs,
            deadFilter: deadFilter, limit: Self.pageJobLimit
        ).render()
        return Self.html(html)
    }

    static func html(_ html: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    // MARK: - Helpers

    /// Runs a queue operation; bad query options answer 400, broker trouble 503.
    func withQueues(_ body: (QueueInspector) async throws -> Response) async throws -> Response {
        guard let queues else { return Self.error(.serviceUnavailable, "queue access is not configured") }
        do {
            return try await body(queues)
        } catch let error as QueryOptions.Problem {
            return Self.error(.badRequest, error.message)
        } catch let error as HTTPError {
            throw error
        } catch {
            logger.warning("queue operation failed", metadata: ["amqp.error": "\(error)"])
            return Self.error(.serviceUnavailable, "broker: \(error)")
        }
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        // Our own value types always encode; an empty object is the safe fallback regardless.
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    static func error(_ status: HTTPResponse.Status, _ message: String) -> Response {
        json(["error": message], status: status)
    }

    static func text(_ text: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; charset=utf-8"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}

// MARK: - JSON bodies

struct Readiness: Codable {
    var ready: Bool
    var broker: String
    var heldBundles: [String]
    /// `ok` or `held` (PostgreSQL unavailable); absent without a registry.
    var registry: String?
}

struct JobList: Codable {
    var kind: String
    var count: Int
    var jobs: [QueuedJob]
}

/// Ready messages of one bundle's queues by role (all retry queues together).
struct QueueTotals: Codable, Hashable {
    var work: Int
    var retry: Int
    var dead: Int

    init(depths: [QueueDepth], bundleID: String) {
        let mine = depths.filter { $0.bundleID == bundleID }
        work = mine.filter { $0.role == "work" }.reduce(0) { $0 + $1.messages }
        retry = mine.filter { $0.role == "retry" }.reduce(0) { $0 + $1.messages }
        dead = mine.filter { $0.role == "dead" }.reduce(0) { $0 + $1.messages }
    }
}

struct StatusReport: Codable {
    struct Bundle: Codable {
        var bundleID: String
        var held: Bool
        /// Jobs by outcome since the process started.
        var jobs: [String: Int]
        /// Jobs by outcome in the last minute.
        var perMinute: [String: Int]
        var inFlight: Int
        /// APNs connections by state.
        var connections: [String: Int]
        /// Nil when the queues could not be read (see `queueError`).
        var queues: QueueTotals?
    }

    var ready: Bool
    var broker: String
    var heldBundles: [String]
    var bundles: [Bundle]
    var queueError: String?
}

// MARK: - Query options

/// The query options of the list, requeue and purge routes:
/// `bundle`, `reason`, `olderThan` (e.g. 90s, 10m, 2h, 1d) and `limit`.
enum QueryOptions {
    struct Problem: Error {
        var message: String
    }

    /// The selection of a bulk requeue or purge. Stricter than a listing's: a key it does not
    /// know, an empty value or `limit` would silently widen what it moves or drops (an empty
    /// `bundle=` from a script must not mean every bundle), so each is a 400.
    static func bulkFilter(_ query: Parameters, allowing extra: Set<String> = []) throws(Problem) -> JobFilter {
        let known: Set<String> = ["bundle", "reason", "olderThan"]
        for (key, value) in query {
            let name = String(key)
            if extra.contains(name) { continue }
            guard known.contains(name) else {
                throw Problem(message: "\(name): not a selection of this route (bundle, reason, olderThan)")
            }
            guard !value.isEmpty else { throw Problem(message: "\(name): empty; leave it out to select every \(name)") }
        }
        return try filter(query).0
    }

    static func filter(_ query: Parameters) throws(Problem) -> (JobFilter, Int?) {
        var filter = JobFilter()
        filter.bundleID = query.get("bundle").flatMap { $0.isEmpty ? nil : $0 }
        filter.reason = query.get("reason").flatMap { $0.isEmpty ? nil : $0 }
        if let text = query.get("olderThan"), !text.isEmpty {
            guard let age = duration(text) else { throw Problem(message: "olderThan: \"\(text)\" is not a duration (e.g. 90s, 10m, 2h, 1d)") }
            filter.olderThan = age
        }
        var limit: Int?
        if let text = query.get("limit"), !text.isEmpty {
            guard let value = Int(text), value > 0 else { throw Problem(message: "limit: \"\(text)\" is not a positive whole number") }
            limit = value
        }
        return (filter, limit)
    }

    /// A whole number and one unit: ms, s, m, h or d.
    static func duration(_ text: String) -> Duration? {
        let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        for (unit, milliseconds) in units where text.hasSuffix(unit) {
            let number = text.dropLast(unit.count)
            // "5ms" also ends in "s": only accept the unit whose prefix is all digits.
            guard !number.isEmpty, number.allSatisfy(\.isASCII), let value = Int64(number), value >= 0 else { continue }
            let (total, overflow) = value.multipliedReportingOverflow(by: milliseconds)
            return overflow ? nil : .milliseconds(total)
        }
        return nil
    }
}
