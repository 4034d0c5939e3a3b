import AMQPClient
import APNSAdmin
import APNSConfig
import APNSModel
import APNSOperations
import APNSSimulator
import APNSTopologyNames
import APNSWorker
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdTesting
import NIOCore
import Testing
import TestSupport

/// Every admin route through Hummingbird's router test client, against a real worker (broker,
/// simulator, transport, pipeline) and real dead and retry queues.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"))
struct AdminRouteTests {
    static let bearer: HTTPFields = [.authorization: "Bearer \(AdminHarness.token)"]

    static func json(_ response: TestResponse) throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: Data(String(buffer: response.body).utf8))
        return try #require(object as? [String: Any])
    }

    @Test func tokenProtectsEverythingButHealth() async throws {
        try await AdminHarness.with { harness in
            try await harness.admin.makeApplication().test(.router) { client in
                #expect(try await client.execute(uri: "/health", method: .get).status == .ok)
                for uri in ["/ready", "/metrics", "/api/status", "/api/dead", "/api/retry", "/"] {
                    #expect(try await client.execute(uri: uri, method: .get).status == .unauthorized, "\(uri) without a token")
                    let wrong = try await client.execute(uri: uri, method: .get, headers: [.authorization: "Bearer wrong-token-0123456789"])
                    #expect(wrong.status == .unauthorized, "\(uri) with a wrong token")
                    let almost = try await client.execute(
                        uri: uri, method: .get, headers: [.authorization: "Bearer \(AdminHarness.token.dropLast())"])
                    #expect(almost.status == .unauthorized, "\(uri) with a prefix of the token")
                }
                let unauthorized = try await client.execute(uri: "/api/status", method: .get)
                #expect(unauthorized.headers[.wwwAuthenticate] == #"Bearer realm="apns-worker""#)
                for uri in ["/api/dead/requeue", "/api/dead/purge?confirm=yes", "/api/retry/purge?confirm=yes", "/dead/x/requeue"] {
                    #expect(try await client.execute(uri: uri, method: .post).status == .unauthorized, "POST \(uri) without a token")
                }
                #expect(try await client.execute(uri: "/ready", method: .get, headers: Self.bearer).status == .ok)

                // Browsers: POST /login with the right token sets an HttpOnly, SameSite=Strict session cookie.
                let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
                #expect(try await client.execute(uri: "/login", method: .post, headers: form, body: ByteBuffer(string: "token=wrong")).status == .unauthorized)
                let login = try await client.execute(
                    uri: "/login", method: .post, headers: form, body: ByteBuffer(string: "token=\(AdminHarness.token)"))
                #expect(login.status == .seeOther)
                #expect(login.headers[.location] == "/")
                let cookie = try #require(login.headers[.setCookie])
                #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"))
                let cookieHeader = String(cookie.split(separator: ";")[0])
                let page = try await client.execute(uri: "/", method: .get, headers: [.cookie: cookieHeader])
                #expect(page.status == .ok)
                #expect(String(buffer: page.body).contains("<table id=\"bundles\">"))
                let badCookie = try await client.execute(uri: "/", method: .get, headers: [.cookie: "\(AdminSessions.cookieName)=nope"])
                #expect(badCookie.status == .unauthorized)
            }
        }
    }

    /// Whether every listed job has the failure time the worker wrote (`x-apns-failed-at`, by
    /// `RFC3339`) in the text `.iso8601` wrote (Foundation's, ICU's, as the oracle), in its header
    /// and in the listing's `failedAt`.
    static func failureTimesAreISO8601s(_ listed: [[String: Any]]) -> Bool {
        listed.allSatisfy { job in
            guard let failedAt = job["failedAt"] as? String, let read = try? Date(failedAt, strategy: .iso8601) else { return false }
            return read.formatted(.iso8601) == failedAt && (job["headers"] as? [String: String])?[JobHeaders.failedAt] == failedAt
        }
    }

    @Test func statusMetricsAndTheDeadQueue() async throws {
        try await AdminHarness.with { harness in
            for n in 0..<3 { try await harness.publishJob(token: n) }
            harness.simulator.script(token: AdminHarness.token(50), .badDeviceToken)
            try await harness.publishJob(token: 50)
            let dead = [try await harness.publishMalformedJob(), try await harness.publishMalformedJob()]
            try await waitUntil("jobs to reach their ends") {
                harness.jobs("delivered") == 3 && harness.jobs("invalid_token") == 1 && harness.jobs("dead") == 2
            }

            try await harness.admin.makeApplication().test(.router) { client in
                // /api/status: counts by outcome, rates, connections, queue depths.
                let status = try Self.json(try await client.execute(uri: "/api/status", method: .get, headers: Self.bearer))
                #expect(status["ready"] as? Bool == true)
                #expect(status["broker"] as? String == "connected")
                let bundles = try #require(status["bundles"] as? [[String: Any]])
                let bundle = try #require(bundles.first)
                #expect(bundle["bundleID"] as? String == harness.bundle)
                let jobs = try #require(bundle["jobs"] as? [String: Int])
                #expect(jobs["delivered"] == 3 && jobs["invalid_token"] == 1 && jobs["dead"] == 2 && jobs["retry"] == 0)
                #expect((bundle["perMinute"] as? [String: Int])?["delivered"] == 3)
                #expect(((bundle["connections"] as? [String: Int])?["ready"] ?? 0) >= 1)
                let queues = try #require(bundle["queues"] as? [String: Int])
                #expect(queues["dead"] == 2 && queues["work"] == 0 && queues["retry"] == 0)

                // The JSON API over the dead queue.
                let list = try Self.json(try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)", method: .get, headers: Self.bearer))
                #expect(list["count"] as? Int == 2)
                let listed = try #require(list["jobs"] as? [[String: Any]])
                #expect(Set(listed.compactMap { $0["jobID"] as? String }) == Set(dead))
                #expect(listed.allSatisfy { $0["reason"] as? String == "MalformedJob" })
                #expect(Self.failureTimesAreISO8601s(listed))
                let limited = try Self.json(
                    try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)&limit=1", method: .get, headers: Self.bearer))
                #expect(limited["count"] as? Int == 1)
                let byReason = try Self.json(
                    try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)&reason=BadDeviceToken", method: .get, headers: Self.bearer))
                #expect(byReason["count"] as? Int == 0)
                let old = try Self.json(
                    try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)&olderThan=1h", method: .get, headers: Self.bearer))
                #expect(old["count"] as? Int == 0)
                let badAge = try await client.execute(uri: "/api/dead?olderThan=soon", method: .get, headers: Self.bearer)
                #expect(badAge.status == .badRequest)
                #expect(try Self.json(badAge)["error"] as? String == #"olderThan: "soon" is not a duration (e.g. 90s, 10m, 2h, 1d)"#)
                #expect(try await client.execute(uri: "/api/dead?limit=0", method: .get, headers: Self.bearer).status == .badRequest)

                let shown = try await client.execute(uri: "/api/dead/\(dead[0])?bundle=\(harness.bundle)", method: .get, headers: Self.bearer)
                #expect(shown.status == .ok)
                let job = try Self.json(shown)
                #expect(job["jobID"] as? String == dead[0])
                #expect(job["status"] as? Int == 0)
                #expect((job["body"] as? String)?.contains("<script>") == true)
                #expect((job["headers"] as? [String: String])?["x-apns-reason"] == "MalformedJob")
                #expect(try await client.execute(uri: "/api/dead/no-such-job", method: .get, headers: Self.bearer).status == .notFound)

                // The HTML page escapes job data.
                let page = String(buffer: try await client.execute(uri: "/", method: .get, headers: Self.bearer).body)
                #expect(page.contains("data-bundle=\"\(harness.bundle)\""))
                #expect(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"))
                #expect(!page.contains("<script>"))
                #expect(!page.contains("<b>bogus</b>"))
                #expect(page.contains("action=\"/dead/\(dead[0])/requeue\""))

                // /metrics: valid Prometheus text with the worker's metric families.
                let metrics = try await client.execute(uri: "/metrics", method: .get, headers: Self.bearer)
                #expect(metrics.status == .ok)
                #expect(metrics.headers[.contentType]?.hasPrefix("text/plain; version=0.0.4") == true)
                let samples = try PrometheusText.parse(String(buffer: metrics.body))
                let b = harness.bundle
                #expect(samples.value("apns_worker_jobs_total", ["bundle": b, "outcome": "delivered"]) == 3)
                #expect(samples.value("apns_worker_jobs_total", ["bundle": b, "outcome": "dead"]) == 2)
                #expect(samples.value("apns_worker_jobs_total", ["bundle": b, "outcome": "invalid_token"]) == 1)
                #expect(samples.value("apns_worker_apns_latency_seconds_count", ["bundle": b]) == 4)
                #expect(samples.value("apns_worker_apns_latency_seconds_bucket", ["bundle": b, "le": "+Inf"]) == 4)
                #expect(samples.value("apns_worker_jobs_in_flight", ["bundle": b]) == 0)
                #expect(samples.value("apns_worker_consumer_paused", ["bundle": b, "reason": "held"]) == 0)
                #expect(samples.value("apns_worker_consumer_paused", ["bundle": b, "reason": "operator"]) == 0)
                #expect((samples.value("apns_transport_connections", ["bundle": b, "state": "ready"]) ?? 0) >= 1)
                #expect(samples.value("apns_transport_connections", ["bundle": b, "state": "closed"]) == 0)
                #expect(samples.value("apns_worker_broker_connected", [:]) == 1)
                // The broker's view of the bundle's queues (deploy/prometheus/ alerts on them).
                #expect(samples.value("apns_worker_queue_messages", ["bundle": b, "role": "dead"]) == 2)
                #expect(samples.value("apns_worker_queue_messages", ["bundle": b, "role": "retry"]) == 0)
                #expect(samples.value("apns_worker_queue_consumers", ["bundle": b, "role": "work"]) == 1)
                #expect(samples.value("apns_worker_queue_consumers", ["bundle": b, "role": "dead"]) == 0)
                #expect(samples.types["apns_worker_jobs_total"] == "counter")
                #expect(samples.types["apns_worker_apns_latency_seconds"] == "histogram")
                #expect(samples.types["apns_transport_jwt_renewals_total"] == "counter")

                // Requeue one by id: it goes back to the work queue, and (still malformed) dead again.
                let requeued = try await client.execute(uri: "/api/dead/\(dead[0])/requeue", method: .post, headers: Self.bearer)
                #expect(requeued.status == .ok)
                #expect(try Self.json(requeued)["moved"] as? Int == 1)
                try await waitUntil("the requeued job to come back dead") { harness.jobs("dead") == 3 }
                // Ids arrive percent-encoded in the path, as the page's forms send them.
                let encoded = try await client.execute(uri: "/api/dead/no%3Asuch%20job/requeue", method: .post, headers: Self.bearer)
                #expect(try Self.json(encoded)["notFound"] as? [String] == ["no:such job"])
                let missing = try await client.execute(uri: "/api/dead/no-such-job/requeue", method: .post, headers: Self.bearer)
                #expect(missing.status == .notFound)
                #expect(try Self.json(missing)["notFound"] as? [String] == ["no-such-job"])

                // The page's form: requeue, then back to the page.
                let form = try await client.execute(uri: "/dead/\(dead[1])/requeue", method: .post, headers: Self.bearer)
                #expect(form.status == .seeOther)
                #expect(form.headers[.location] == "/")
                try await waitUntil("the form-requeued job to come back dead") { harness.jobs("dead") == 4 }

                // Requeue all with a filter.
                let all = try await client.execute(uri: "/api/dead/requeue?bundle=\(harness.bundle)", method: .post, headers: Self.bearer)
                #expect(try Self.json(all)["moved"] as? Int == 2)
                try await waitUntil("both to come back dead") { harness.jobs("dead") == 6 }

                // A bulk selection that would widen silently is refused before anything moves:
                // an empty bundle, a key the route does not know, a limit.
                for query in ["bundle=", "bundle=\(harness.bundle)&older_than=1h", "bundle=\(harness.bundle)&limit=1"] {
                    let refused = try await client.execute(uri: "/api/dead/purge?\(query)&confirm=yes", method: .post, headers: Self.bearer)
                    #expect(refused.status == .badRequest, "purge?\(query)")
                    let refusedMove = try await client.execute(uri: "/api/dead/requeue?\(query)", method: .post, headers: Self.bearer)
                    #expect(refusedMove.status == .badRequest, "requeue?\(query)")
                }
                #expect(try await harness.queues.list(.dead, filter: .init(bundleID: harness.bundle)).count == 2)

                // A browser's cross-site or cross-origin POST is refused even with the cookie or token.
                for headers: HTTPFields in [
                    [.authorization: "Bearer \(AdminHarness.token)", HTTPField.Name("Sec-Fetch-Site")!: "cross-site"],
                    [.authorization: "Bearer \(AdminHarness.token)", .origin: "http://evil.example"],
                ] {
                    let forged = try await client.execute(uri: "/api/dead/purge?confirm=yes", method: .post, headers: headers)
                    #expect(forged.status == .forbidden)
                }
                #expect(try await harness.queues.list(.dead, filter: .init(bundleID: harness.bundle)).count == 2)
                #expect(try await client.execute(uri: "/", method: .get, headers: Self.bearer).headers[HTTPField.Name("X-Frame-Options")!] == "DENY")

                // Purge needs confirm=yes.
                let unconfirmed = try await client.execute(uri: "/api/dead/purge?bundle=\(harness.bundle)", method: .post, headers: Self.bearer)
                #expect(unconfirmed.status == .badRequest)
                #expect(try await harness.queues.list(.dead, filter: .init(bundleID: harness.bundle)).count == 2)
                let purged = try await client.execute(
                    uri: "/api/dead/purge?bundle=\(harness.bundle)&confirm=yes", method: .post, headers: Self.bearer)
                #expect(try Self.json(purged)["purged"] as? Int == 2)
                let empty = try Self.json(try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)", method: .get, headers: Self.bearer))
                #expect(empty["count"] as? Int == 0)
            }
        }
    }

    /// Anyone on the vhost can publish to a dead queue with any `x-apns-failed-at`. One that is
    /// not RFC 3339 (forms Foundation's `.iso8601` took, garbage, a 4 KiB string) is listed
    /// without a failure time, its age taken from the publish time; the header is shown as sent.
    @Test func aForgedFailureTimeIsListedAsAbsent() async throws {
        try await AdminHarness.with { harness in
            let forged = [
                "2026-11-31T10:00:00Z", "2026-11-20T24:00:00Z", "2026-11-20T10:00:00Zjunk", "2026-11-20T10:00:00+0100", "now",
                String(repeating: "9", count: 4_096),
            ]
            let published = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down) - 7200)
            let failedAt = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down) - 10)
            for (index, value) in (forged + [failedAt.formatted(.iso8601)]).enumerated() {
                var properties = AMQPProperties.persistentJSON
                properties.messageID = "forged-\(index)"
                properties.timestamp = published
                properties.headers = [JobHeaders.reason: .string("BadDeviceToken"), JobHeaders.failedAt: .string(value)]
                let body = #"{"token":"\#(AdminHarness.token(index))","payload":{"aps":{"alert":"x"}},"id":"forged-\#(index)"}"#
                try await harness.publisher.publishAgainAfterNacks(
                    AMQPOutboundMessage(exchange: "", routingKey: TopologyNames.deadQueue(harness.bundle), body: Array(body.utf8), properties: properties))
            }
            try await harness.admin.makeApplication().test(.router) { client in
                var listed: [[String: Any]] = []
                try await waitUntil("the dead letters to be listed") {
                    let list = try Self.json(try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)", method: .get, headers: Self.bearer))
                    listed = list["jobs"] as? [[String: Any]] ?? []
                    return listed.count == forged.count + 1
                }
                for (index, job) in listed.enumerated() {
                    #expect(job["jobID"] as? String == "forged-\(index)")
                    #expect(job["reason"] as? String == "BadDeviceToken")
                    #expect(job["publishedAt"] as? String == published.formatted(.iso8601))
                    if index < forged.count {
                        #expect(job["failedAt"] == nil, "\(forged[index].prefix(30))")
                        #expect((job["headers"] as? [String: String])?[JobHeaders.failedAt] == forged[index])
                    } else {
                        #expect(job["failedAt"] as? String == failedAt.formatted(.iso8601))
                    }
                }
                // Age filters measure the forged ones from their publish time, two hours ago.
                let old = try Self.json(
                    try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)&olderThan=1h", method: .get, headers: Self.bearer))
                #expect((old["jobs"] as? [[String: Any]])?.compactMap { $0["jobID"] as? String } == forged.indices.map { "forged-\($0)" })
                let page = try await client.execute(uri: "/", method: .get, headers: Self.bearer)
                #expect(page.status == .ok)
                #expect(String(buffer: page.body).contains("forged-0"))
            }
            #expect(try await harness.queues.list(.dead, filter: .init(bundleID: harness.bundle)).count == forged.count + 1, "nothing moved")
        }
    }

    @Test func theRetryQueues() async throws {
        try await AdminHarness.with { harness in
            harness.simulator.script(token: AdminHarness.token(7), .always(status: 503, reason: .serviceUnavailable))
            let id = try await harness.publishJob(token: 7)
            try await waitUntil("the job to be retried") { harness.jobs("retry") == 1 }
            try await harness.admin.makeApplication().test(.router) { client in
                let list = try Self.json(try await client.execute(uri: "/api/retry?bundle=\(harness.bundle)", method: .get, headers: Self.bearer))
                #expect(list["count"] as? Int == 1)
                let job = try #require((list["jobs"] as? [[String: Any]])?.first)
                #expect(job["jobID"] as? String == id)
                #expect(job["attempts"] as? Int == 1)
                #expect(try await client.execute(uri: "/api/retry/\(id)", method: .get, headers: Self.bearer).status == .ok)

                let requeued = try await client.execute(uri: "/api/retry/\(id)/requeue", method: .post, headers: Self.bearer)
                #expect(try Self.json(requeued)["moved"] as? Int == 1)
                try await waitUntil("the requeued job to be retried again") { harness.jobs("retry") == 2 }
                #expect(try await client.execute(uri: "/api/retry/purge", method: .post, headers: Self.bearer).status == .badRequest)
                let purged = try await client.execute(
                    uri: "/api/retry/purge?bundle=\(harness.bundle)&confirm=yes", method: .post, headers: Self.bearer)
                #expect(try Self.json(purged)["purged"] as? Int == 1)
                let metrics = try PrometheusText.parse(
                    String(buffer: try await client.execute(uri: "/metrics", method: .get, headers: Self.bearer).body))
                // The requeue reset the attempts: both sends were first attempts.
                #expect(metrics.value("apns_worker_retries_total", ["bundle": harness.bundle, "attempt": "1"]) == 2)
            }
        }
    }

    @Test func readyAnswers503WhileABundleIsHeld() async throws {
        try await AdminHarness.with { harness in
            harness.simulator.script(token: AdminHarness.token(13), .always(status: 403, reason: .invalidProviderToken))
            try await harness.publishJob(token: 13)
            try await waitUntil("the bundle to be held") { harness.worker.heldBundles == [harness.bundle] }
            try await waitUntil("the held job to be back in its work queue") {
                try await harness.queues.depths().first { $0.role == "work" }?.messages == 1
            }
            try await harness.admin.makeApplication().test(.router) { client in
                let ready = try await client.execute(uri: "/ready", method: .get, headers: Self.bearer)
                #expect(ready.status == .serviceUnavailable)
                let body = try Self.json(ready)
                #expect(body["ready"] as? Bool == false)
                #expect(body["heldBundles"] as? [String] == [harness.bundle])
                #expect(body["broker"] as? String == "connected")
                let metrics = try PrometheusText.parse(
                    String(buffer: try await client.execute(uri: "/metrics", method: .get, headers: Self.bearer).body))
                #expect(metrics.value("apns_worker_consumer_paused", ["bundle": harness.bundle, "reason": "held"]) == 1)
                #expect(metrics.value("apns_worker_consumer_paused", ["bundle": harness.bundle, "reason": "operator"]) == 0)
                let page = String(buffer: try await client.execute(uri: "/", method: .get, headers: Self.bearer).body)
                #expect(page.contains(#"<td class="held">HELD</td>"#))
                #expect(page.contains(#"id="held-alert""#))
                let status = try Self.json(try await client.execute(uri: "/api/status", method: .get, headers: Self.bearer))
                #expect(status["heldBundles"] as? [String] == [harness.bundle])
                // The held job waits in the broker, not dead-lettered.
                #expect((status["bundles"] as? [[String: Any]])?.first?["queues"] as? [String: Int] == ["work": 1, "retry": 0, "dead": 0])
            }
        }
    }
}

/// `/ready` without the broker: the worker's own connection closed.
@Suite(.enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"))
struct AdminReadinessTests {
    @Test func readyAnswers503WhenTheBrokerConnectionIsDown() async throws {
        try await AdminHarness.with { harness in
            await harness.workerConnection.close()
            try await harness.admin.makeApplication().test(.router) { client in
                let ready = try await client.execute(uri: "/ready", method: .get, headers: AdminRouteTests.bearer)
                #expect(ready.status == .serviceUnavailable)
                let body = try AdminRouteTests.json(ready)
                #expect(body["ready"] as? Bool == false)
                #expect(body["broker"] as? String == "closed")
                #expect(body["heldBundles"] as? [String] == [])
                #expect(try await client.execute(uri: "/health", method: .get).status == .ok)
            }
        }
    }
}

/// Settings the admin server refuses, without any network.
@Suite struct AdminSettingsTests {
    @Test func refusesToListenBeyondLoopbackWithoutAToken() throws {
        let status = FixedStatus()
        for host in ["0.0.0.0", "192.168.1.10", "::"] {
            let error = #expect(throws: AdminConfigurationError.self) {
                try AdminService(
                    settings: AdminSettings(listen: ListenAddress(host: host, port: 8080)), worker: status, queues: nil, prometheus: nil,
                    logger: AdminHarness.logger)
            }
            #expect(error?.description.hasPrefix("[admin] token: required when listen") == true)
        }
        for host in ["127.0.0.1", "127.1.2.3", "localhost", "::1"] {
            _ = try AdminService(
                settings: AdminSettings(listen: ListenAddress(host: host, port: 8080)), worker: status, queues: nil, prometheus: nil,
                logger: AdminHarness.logger)
        }
        _ = try AdminService(
            settings: AdminSettings(listen: ListenAddress(host: "0.0.0.0", port: 8080), token: AdminHarness.token), worker: status,
            queues: nil, prometheus: nil, logger: AdminHarness.logger)
    }

    @Test func withoutATokenEverythingIsOpenOnLoopback() async throws {
        let admin = try AdminService(
            settings: AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0)), worker: FixedStatus(), queues: nil, prometheus: nil,
            logger: AdminHarness.logger)
        try await admin.makeApplication().test(.router) { client in
            #expect(try await client.execute(uri: "/ready", method: .get).status == .ok)
            // No queue access configured: the queue routes say so instead of failing.
            #expect(try await client.execute(uri: "/api/dead", method: .get).status == .serviceUnavailable)
            #expect(try await client.execute(uri: "/metrics", method: .get).status == .serviceUnavailable)
            let page = String(buffer: try await client.execute(uri: "/", method: .get).body)
            #expect(page.contains("queue access is not configured"))
        }
    }
}

/// `apns-worker run` itself refuses an admin server beyond loopback without a token.
@Suite struct AdminStartupTests {
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: workerExecutable), "apns-worker is not built"))
    func runRefusesToStartWithoutATokenBeyondLoopback() async throws {
        let directory = NSTemporaryDirectory() + "apnsw-admin-start-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/worker.conf"
        try """
            [amqp]
            url = amqp://guest:guest@127.0.0.1:1/%2f
            [admin]
            listen = 0.0.0.0:8080
            [apns "com.example.app"]
            certFile = cert.pem
            keyFile = key.pem
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let result = try await runProcess(workerExecutable, ["run", "--config", config], environment: ["APNS_WORKER_ADMIN_TOKEN": ""])
        #expect(result.status != 0)
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1, "one line: \(result.stderr)")
        #expect(result.stderr.contains("worker.conf:4: [admin] token: required when listen (0.0.0.0:8080) is not a loopback address"))
    }
}
