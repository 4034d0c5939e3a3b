import APNSAdmin
import APNSConfig
import APNSSimulator
import APNSWorker
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing
import TestSupport

/// The admin's access model: the Host allowlist without a token (DNS rebinding), login
/// by POST with a session cookie that is not the token, the bound on operator requests, and
/// the admin over TLS. No broker: the routes that matter here answer without one.
@Suite struct AdminAccessTests {
    static let token = "test-admin-token-0123456789"

    static func admin(token: String? = token, listen: String = "127.0.0.1", port: Int = 0, concurrent: Int = 4) throws -> AdminService {
        try AdminService(
            settings: AdminSettings(listen: ListenAddress(host: listen, port: port), token: token), worker: FixedStatus(), queues: nil,
            prometheus: nil, logger: AdminHarness.logger, concurrentRequests: concurrent)
    }

    // MARK: - Pure decisions

    @Test func theHostAllowlist() {
        let hosts = AdminHostAllowlist(listenHost: "127.0.0.2", allowed: ["ops.internal."])
        for ok in ["localhost", "localhost:8080", "LOCALHOST.:1", "127.0.0.1:9", "[::1]:8080", "[::1]", "127.0.0.2:80", "ops.internal", "Ops.Internal:8080"] {
            #expect(hosts.allows(ok), "\(ok)")
        }
        for refused in [
            nil, "", "evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.nip.io", "[::2]:80", "localhost:80:80",
            "user@localhost", "localhost:8x", "[::1", "[::1]x",
        ] as [String?] {
            #expect(!hosts.allows(refused), "\(refused ?? "nil")")
        }
    }

    @Test func aSessionIsNotTheTokenAndExpires() {
        let sessions = AdminSessions(token: Self.token, lifetime: .seconds(60))
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let session = sessions.issue(now: now)
        #expect(!session.contains(Self.token))
        #expect(sessions.isValid(session, now: now))
        #expect(sessions.isValid(session, now: now + 59))
        #expect(!sessions.isValid(session, now: now + 60), "expired")
        #expect(sessions.issue(now: now) != session, "every session has its own nonce")
        // Another token's sessions, a forged expiry, a changed MAC, the token itself: refused.
        #expect(!AdminSessions(token: Self.token + "x").isValid(session, now: now))
        var parts = session.split(separator: ".").map(String.init)
        let forged = ([parts[0], String(Int(parts[1])! + 3600)] + parts[2...]).joined(separator: ".")
        #expect(!sessions.isValid(forged, now: now + 120))
        parts[3] = String(parts[3].reversed())
        #expect(!sessions.isValid(parts.joined(separator: "."), now: now))
        for junk in [Self.token, "", "v1", "v1.1.2.3", "v1.x.\(String(repeating: "0", count: 32)).00"] {
            #expect(!sessions.isValid(junk, now: now))
        }
        let cookie = sessions.setCookie(now: now, secure: false)
        #expect(cookie.hasPrefix("\(AdminSessions.cookieName)=v1."))
        #expect(cookie.contains("; HttpOnly") && cookie.contains("; SameSite=Strict") && cookie.contains("; Max-Age=60"))
        #expect(!cookie.contains("Secure"))
        #expect(sessions.setCookie(now: now, secure: true).hasSuffix("; Secure"))
    }

    @Test func theRequestGate() {
        let gate = AdminRequestGate(limit: 2)
        #expect(gate.enter() && gate.enter())
        #expect(!gate.enter())
        gate.leave()
        #expect(gate.enter())
        #expect(gate.current == 2)
    }

    // MARK: - Through the router

    @Test func loginIsAPostAndItsCookieIsASession() async throws {
        try await Self.admin().makeApplication().test(.router) { client in
            // The token in a URL is gone: GET /login neither logs in nor sets a cookie.
            let get = try await client.execute(uri: "/login?token=\(Self.token)", method: .get)
            #expect(get.status != .seeOther && get.headers[.setCookie] == nil)
            let getWithBearer = try await client.execute(
                uri: "/login?token=\(Self.token)", method: .get, headers: [.authorization: "Bearer \(Self.token)"])
            #expect(getWithBearer.headers[.setCookie] == nil)

            let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            #expect(try await client.execute(uri: "/login", method: .post, headers: form, body: ByteBuffer(string: "token=wrong")).status == .unauthorized)
            #expect(try await client.execute(uri: "/login", method: .post, headers: form).status == .unauthorized)
            let login = try await client.execute(uri: "/login", method: .post, headers: form, body: ByteBuffer(string: "token=\(Self.token)"))
            #expect(login.status == .seeOther && login.headers[.location] == "/")
            let cookie = try #require(login.headers[.setCookie])
            #expect(!cookie.contains(Self.token))
            #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Max-Age="))
            #expect(!cookie.contains("Secure"), "not over plain HTTP")
            let session = String(cookie.split(separator: ";")[0])
            #expect(try await client.execute(uri: "/api/status", method: .get, headers: [.cookie: session]).status == .ok)
            // The token itself as a cookie (what the old login set) no longer opens anything.
            let raw = try await client.execute(uri: "/api/status", method: .get, headers: [.cookie: "\(AdminSessions.cookieName)=\(Self.token)"])
            #expect(raw.status == .unauthorized)
            let old = try await client.execute(uri: "/api/status", method: .get, headers: [.cookie: "apns_admin_token=\(Self.token)"])
            #expect(old.status == .unauthorized)
            // The login page posts the form.
            let page = String(buffer: try await client.execute(uri: "/", method: .get).body)
            #expect(page.contains(#"<form method="post" action="/login">"#) && page.contains(#"type="password" name="token""#))
        }
    }

    /// Prometheus scrapes with a read-only credential of its own. The metrics token
    /// opens `GET /metrics` and nothing else (not the API, the probes, the page, a login, a
    /// purge); the admin token still opens `/metrics` too.
    @Test func theMetricsTokenOpensMetricsAndNothingElse() async throws {
        let metricsToken = "test-metrics-token-9876543210"
        var settings = AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: Self.token)
        settings.metricsToken = metricsToken
        let admin = try AdminService(
            settings: settings, worker: FixedStatus(), queues: nil, prometheus: TestMetrics.prometheus, logger: AdminHarness.logger)
        try await admin.makeApplication().test(.router) { client in
            let asMetrics: HTTPFields = [.authorization: "Bearer \(metricsToken)"]
            let scrape = try await client.execute(uri: "/metrics", method: .get, headers: asMetrics)
            #expect(scrape.status == .ok)
            #expect(String(buffer: scrape.body).contains("apns_worker_broker_connected"))
            #expect(try await client.execute(uri: "/metrics", method: .get, headers: [.authorization: "Bearer \(Self.token)"]).status == .ok)
            #expect(try await client.execute(uri: "/metrics", method: .get).status == .unauthorized)
            #expect(try await client.execute(uri: "/metrics", method: .get, headers: [.authorization: "Bearer \(metricsToken)x"]).status == .unauthorized)
            for uri in ["/", "/ready", "/api/status", "/api/dead", "/metrics/../api/status"] {
                #expect(try await client.execute(uri: uri, method: .get, headers: asMetrics).status == .unauthorized, "\(uri)")
            }
            for uri in ["/api/dead/purge?confirm=yes", "/api/bundles/com.example.app/pause", "/metrics"] {
                #expect(try await client.execute(uri: uri, method: .post, headers: asMetrics).status == .unauthorized, "POST \(uri)")
            }
            let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            let login = try await client.execute(uri: "/login", method: .post, headers: form, body: ByteBuffer(string: "token=\(metricsToken)"))
            #expect(login.status == .unauthorized && login.headers[.setCookie] == nil, "the metrics token is no login")
        }
        // Without metricsToken configured, that value opens nothing.
        try await Self.admin().makeApplication().test(.router) { client in
            let scrape = try await client.execute(uri: "/metrics", method: .get, headers: [.authorization: "Bearer \(metricsToken)"])
            #expect(scrape.status == .unauthorized)
        }
    }

    @Test func crossSitePostsAreRefused() async throws {
        try await Self.admin(token: nil).makeApplication().test(.router) { client in
            let bearer: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            for headers: HTTPFields in [
                [HTTPField.Name("Sec-Fetch-Site")!: "cross-site"], [HTTPField.Name("Sec-Fetch-Site")!: "same-site"],
                [.origin: "http://evil.example"], [.origin: "null"], [.origin: "http://localhost:9999"],
            ] {
                var all = bearer
                all.append(contentsOf: headers)
                for uri in ["/api/dead/purge?confirm=yes", "/bulk/dead/requeue", "/api/bundles/com.example.app/pause", "/login"] {
                    #expect(try await client.execute(uri: uri, method: .post, headers: all).status == .forbidden, "\(uri) \(headers)")
                }
            }
            // A same-origin POST passes the check (and then finds no queue access here).
            let same = try await client.execute(uri: "/api/dead/purge?confirm=yes", method: .post, headers: [.origin: "http://localhost"])
            #expect(same.status == .serviceUnavailable)
        }
    }

    @Test func operatorRequestsBeyondTheBoundAreAnswered503() async throws {
        let admin = try Self.admin(token: nil, concurrent: 1)
        try await admin.makeApplication().test(.router) { client in
            #expect(try await client.execute(uri: "/api/status", method: .get).status == .ok)
            // One request in flight (held by the test) fills the bound.
            #expect(admin.requestGate.enter())
            let busy = try await client.execute(uri: "/api/status", method: .get)
            #expect(busy.status == .serviceUnavailable && busy.headers[.retryAfter] == "1")
            #expect(try await client.execute(uri: "/", method: .get).status == .serviceUnavailable)
            // Probes and metrics still answer: a busy admin is alive.
            #expect(try await client.execute(uri: "/health", method: .get).status == .ok)
            #expect(try await client.execute(uri: "/ready", method: .get).status == .ok)
            admin.requestGate.leave()
            #expect(try await client.execute(uri: "/api/status", method: .get).status == .ok)
            #expect(admin.requestGate.current == 0, "every request left the gate")
        }
    }

    // MARK: - Over a real socket (curl sets any Host, and speaks TLS)

    /// Runs an admin on `settings` (no worker behind it) on a free port for `body`.
    static func serving(_ settings: AdminSettings, _ body: (Int) async throws -> Void) async throws {
        try await servingAdmin({ onListening in
            try AdminService(
                settings: settings, worker: FixedStatus(), queues: nil, prometheus: nil, logger: AdminHarness.logger,
                onListening: onListening)
        }, body)
    }

    /// curl's status code and response headers.
    static func curl(_ arguments: [String]) async throws -> (status: Int, headers: String, stderr: String) {
        let result = try await runProcess("/usr/bin/curl", ["-sS", "-o", "/dev/null", "-D", "-", "-w", "%{http_code}"] + arguments)
        // `-w %{http_code}` writes three digits after the headers (000: no HTTP answer).
        return (Int(result.stdout.suffix(3)) ?? 0, result.stdout, result.stderr)
    }

    static func status(_ arguments: [String]) async throws -> Int {
        try await curl(arguments).status
    }

    @Test func withoutATokenAForeignHostIsRefused() async throws {
        try await Self.serving(AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0))) { port throws in
            let url = "http://127.0.0.1:\(port)/api/status"
            #expect(try await Self.status([url]) == 200)
            #expect(try await Self.status(["-H", "Host: localhost:\(port)", url]) == 200)
            // A DNS-rebinding page: its own name resolves to 127.0.0.1, the browser sends it as Host.
            #expect(try await Self.status(["-H", "Host: rebind.evil.example:\(port)", url]) == 403)
            #expect(try await Self.status(["-X", "POST", "-H", "Host: rebind.evil.example", "http://127.0.0.1:\(port)/api/dead/purge?confirm=yes"]) == 403)
        }
        var settings = AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0))
        settings.allowedHosts = ["ops.internal"]
        try await Self.serving(settings) { port throws in
            #expect(try await Self.status(["-H", "Host: ops.internal", "http://127.0.0.1:\(port)/api/status"]) == 200)
        }
    }

    @Test func overTLSWithATestCA() async throws {
        let directory = NSTemporaryDirectory() + "apnsw-admin-tls-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let credentials = try SimulatorCredentials.generate(into: directory, teamID: "TEAM123456", keyID: "KEY1234567")
        var settings = AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: Self.token)
        settings.certFile = credentials.serverCertificatePath
        settings.keyFile = credentials.serverKeyPath
        try await Self.serving(settings) { port in
            let base = "https://localhost:\(port)"
            let ca = ["--cacert", credentials.caCertificatePath]
            #expect(try await Self.status(ca + [base + "/health"]) == 200)
            // Not plain HTTP, and not a certificate curl trusts without the test CA.
            #expect(try await Self.status(["http://127.0.0.1:\(port)/health"]) != 200)
            #expect(try await Self.status([base + "/health"]) == 0)
            #expect(try await Self.status(ca + [base + "/api/status"]) == 401)
            let login = try await Self.curl(ca + ["--data-urlencode", "token=\(Self.token)", base + "/login"])
            #expect(login.status == 303)
            let cookieLine = try #require(login.headers.split(separator: "\r\n").first { $0.lowercased().hasPrefix("set-cookie:") })
            #expect(cookieLine.contains("; Secure") && cookieLine.contains("HttpOnly") && cookieLine.contains("SameSite=Strict"))
            let session = String(cookieLine.dropFirst("set-cookie:".count).split(separator: ";")[0]).trimmingCharacters(in: .whitespaces)
            #expect(try await Self.status(ca + ["-b", session, base + "/api/status"]) == 200)
        }
    }
}
