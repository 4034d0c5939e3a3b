/// Every admin route: probes (`/health`, `/ready`), `/metrics`, the JSON API over the worker's
/// status and the dead and retry queues, the HTML page with its requeue forms, and `/login`.
import APNSAdminQuery
import APNSModel
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
    let prometheus: PrometheusCollectorRegistry?
    /// The gauges `/metrics` samples, made once per server.
    let metrics: AdminMetrics
    let token: String?
    /// The admin is served over TLS: its session cookie is `Secure`.
    var secureCookies = false
    let logger: Logger
    /// This instance's part in the fleet: heartbeats heard, pause and resume. Nil in tests of
    /// the routes alone; the page then shows this instance only.
    var fleet: (any FleetOperating)? = nil

    /// Dead (and retry) jobs the HTML page lists at once; further dead jobs are on next pages.
    static let pageJobLimit = 100
    /// Messages one listing or `show` reads at most: a filter that matches little could
    /// otherwise read whole queues (up to 65,535 messages each) into the worker for one page.
    static let listingScanLimit = 10_000

    func register(on router: Router<BasicRequestContext>) {
        router.get("/health") { _, _ -> Response in Self.text("ok\n") }
        router.get("/ready") { _, _ -> Response in self.ready() }
        router.get("/metrics") { _, _ -> Response in await self.metrics() }
        // POST only: a token in a URL lands in browser history and proxy logs.
        router.post("/login") { request, _ -> Response in try await self.login(request) }
        router.get("/api/status") { _, _ -> Response in await self.statusJSON() }
        for kind in JobQueueKind.allCases {
            router.get("/api/\(kind.rawValue)") { request, _ -> Response in
                try await self.withQueues { queues in
                    let (selection, page) = try AdminQuery.listing(QueryOptions.pairs(request.uri.queryParameters))
                    let listing = try await queues.list([
                        ListingRequest(
                            kind: kind, filter: QueryOptions.filter(selection), offset: page.offset, limit: page.limit,
                            scanLimit: Self.listingScanLimit)
                    ])[0]
                    return Self.json(JobList(kind: kind.rawValue, limit: page.limit, listing: listing))
                }
            }
            router.get("/api/\(kind.rawValue)/:jobID") { request, context -> Response in
                try await self.withQueues { queues in
                    let jobID = try Self.jobID(context)
                    let bundle = AdminQuery.nonEmpty("bundle", QueryOptions.pairs(request.uri.queryParameters))
                    guard let job = try await queues.show(kind, jobID: jobID, bundleID: bundle, scanLimit: Self.listingScanLimit) else {
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
                    guard AdminQuery.purgeConfirmed(QueryOptions.pairs(request.uri.queryParameters)) else {
                        return Self.error(.badRequest, "purge drops jobs for good: add confirm=yes")
                    }
                    let filter = try QueryOptions.bulkFilter(request.uri.queryParameters, allowing: ["confirm"])
                    return Self.json(try await queues.purge(kind, .all(filter)))
                }
            }
            // The page's requeue buttons: a plain form POST, then back to the page.
            router.post("/\(kind.rawValue)/:jobID/requeue") { _, context -> Response in
                try await self.withQueues { queues in
                    let jobID = try Self.jobID(context)
                    let report = try await queues.requeue(kind, .jobIDs([jobID]))
                    self.logger.info("job requeued from the admin page", metadata: ["job.id": "\(jobID)", "operations.moved": "\(report.moved)"])
                    return Response(status: .seeOther, headers: [.location: "/"])
                }
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
        let body = Readiness(
            ready: status.isReady, broker: status.broker, topologyDeclared: status.topologyDeclared, heldBundles: status.heldBundles,
            registry: status.registry)
        return Self.json(body, status: status.isReady ? .ok : .serviceUnavailable)
    }

    func metrics() async -> Response {
        guard let prometheus else { return Self.error(.serviceUnavailable, "metrics are not bootstrapped") }
        let status = worker.status()
        metrics.sample(status)
        if let queues {
            metrics.sample(await queueDepths().0, bundleIDs: status.bundles.map(\.bundleID), registryQueues: queues.registryQueues)
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: prometheus.emitToBuffer())))
    }

    /// The login form's body, `token=…` (application/x-www-form-urlencoded).
    struct LoginForm: Decodable {
        var token: String
    }

    /// Checks the token of the login form and answers a new session cookie (`AdminSessions`),
    /// never the token itself.
    func login(_ request: Request) async throws -> Response {
        guard let token else { return Response(status: .seeOther, headers: [.location: "/"]) }
        let body = try await request.body.collect(upTo: 4096)
        guard let form = try? URLEncodedFormDecoder().decode(LoginForm.self, from: String(buffer: body)),
            AdminAuthentication<BasicRequestContext>.constantTimeEqual(form.token, token)
        else { return Self.error(.unauthorized, "wrong or missing token") }
        var headers = HTTPFields()
        headers[.location] = "/"
        headers[.setCookie] = AdminSessions(token: token).setCookie(now: Date(), secure: secureCookies)
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
                pools: status.pools, queueError: queueError, configuration: status.configuration))
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
        var unreadable: (dead: String?, retry: String?) = (nil, nil)
        let (selection, deadOffset) = AdminQuery.pageView(QueryOptions.pairs(request.uri.queryParameters))
        let deadFilter = QueryOptions.filter(selection)
        if let queues, queueError == nil {
            do {
                // One more than a page: whether there is a next one.
                let lists = try await queues.list([
                    ListingRequest(kind: .retry, limit: Self.pageJobLimit + 1, scanLimit: Self.listingScanLimit),
                    ListingRequest(kind: .dead, filter: deadFilter, offset: deadOffset, limit: Self.pageJobLimit + 1, scanLimit: Self.listingScanLimit),
                ])
                retryJobs = lists[0].jobs
                deadJobs = lists[1].jobs
                unreadable = (Self.unreadable(lists[1], queues), Self.unreadable(lists[0], queues))
            } catch {
                queueError = "\(error)"
                depths = nil
            }
        }
        if let queueError { unreadable = (queueError, queueError) }
        let html = StatusPage(
            status: status, fleet: fleet?.report(), fleetView: fleet?.snapshot(), instanceID: fleet?.identity.instanceID,
            depths: depths, retryDelays: queues?.retryDelays ?? [], queueError: queueError, deadJobs: deadJobs, retryJobs: retryJobs,
            deadFilter: deadFilter, deadOffset: deadOffset, limit: Self.pageJobLimit,
            deadUnreadable: unreadable.dead, retryUnreadable: unreadable.retry
        ).render()
        return Self.html(html)
    }

    /// Why a listing is not the queues' whole content, or nil when it is.
    static func unreadable(_ listing: JobListing, _ queues: QueueInspector) -> String? {
        if listing.unread > 0 {
            return "\(listing.unread) of the messages the queues hold did not arrive within \(queues.deliveryWait) "
                + "(another reader, such as another admin server or the CLI, holds them while it lists); reload the page"
        }
        if listing.heldElsewhere {
            return "another reader (another admin server or the CLI) holds messages of these queues while it lists them; reload the page"
        }
        return nil
    }

    static func html(_ html: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    // MARK: - Helpers

    /// Runs a queue operation; bad query options answer 400, and a failure what it is
    /// (`OperationFailure`): 503 only for a broker that cannot be reached, which waiting cures.
    func withQueues(_ body: (QueueInspector) async throws -> Response) async throws -> Response {
        guard let queues else { return Self.error(.serviceUnavailable, "queue access is not configured") }
        do {
            return try await body(queues)
        } catch let error as QueryOptions.Problem {
            return Self.error(.badRequest, error.message)
        } catch let error as HTTPError {
            throw error
        } catch let error as CancellationError {
            throw error
        } catch {
            let failure = OperationFailure(error)
            logger.log(level: failure == .unexpected ? .error : .warning, "queue operation failed", metadata: ["amqp.error": "\(error)"])
            return switch failure {
            case .brokerUnavailable: Self.error(.serviceUnavailable, "broker: \(error)")
            case .noWorkQueue:
                Self.error(.conflict, "a job's work queue does not exist, so the broker returned the job (a worker declares the queue when it starts the bundle); the jobs not moved stay where they were: \(error)")
            case .brokerRefused: Self.error(.badGateway, "the broker refused: \(error)")
            case .invalidName: Self.error(.badRequest, "\(error)")
            case .unexpected: Self.error(.internalServerError, "queue operation failed: \(error)")
            }
        }
    }

    /// Dates by `RFC3339`: the strings `.iso8601` wrote, without faulting ICU into the worker.
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .rfc3339
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
    /// False from start-up until the worker's queues are declared.
    var topologyDeclared: Bool
    var heldBundles: [String]
    /// `ok` or `held` (PostgreSQL unavailable); absent without a registry.
    var registry: String?
}

/// One page of `GET /api/{dead|retry}`.
struct JobList: Codable {
    var kind: String
    /// Jobs on this page.
    var count: Int
    var offset: Int
    var limit: Int
    /// The `offset` of the next page; nil on the last.
    var next: Int?
    /// Messages read to answer; `scanLimited`: the read stopped at its bound before the end.
    var scanned: Int
    var scanLimited: Bool
    /// Messages the queues held that did not arrive in time (`JobListing.unread`): the page is
    /// not their whole content.
    var unread: Int
    var heldElsewhere: Bool
    var jobs: [QueuedJob]

    init(kind: String, limit: Int, listing: JobListing) {
        self.kind = kind
        count = listing.jobs.count
        offset = listing.offset
        self.limit = limit
        next = listing.more ? listing.offset + listing.jobs.count : nil
        scanned = listing.scanned
        scanLimited = listing.scanLimited
        unread = listing.unread
        heldElsewhere = listing.heldElsewhere
        jobs = listing.jobs
    }
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
    /// The connection pools, each once with the bundles that share it.
    var pools: [WorkerStatus.Pool]
    var queueError: String?
    /// The configuration in force: when it was read, its fingerprint, what waits for a restart.
    var configuration: ConfigurationInForce?
}

// MARK: - Query options

/// The bridge from Hummingbird's query parameters to `AdminQuery`, where every admin query
/// parameter is parsed (a pure function, fuzzed).
enum QueryOptions {
    typealias Problem = AdminQuery.Problem

    static func pairs(_ query: Parameters) -> [(String, String)] {
        query.map { (String($0.key), String($0.value)) }
    }

    static func filter(_ selection: AdminQuery.Selection) -> JobFilter {
        JobFilter(bundleID: selection.bundleID, reason: selection.reason, olderThan: selection.olderThan)
    }

    /// `AdminQuery.bulkSelection` of a request, as a filter.
    static func bulkFilter(_ query: Parameters, allowing extra: Set<String> = []) throws(Problem) -> JobFilter {
        filter(try AdminQuery.bulkSelection(pairs(query), allowing: extra))
    }
}
