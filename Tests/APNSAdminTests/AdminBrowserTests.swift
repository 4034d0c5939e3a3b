import APNSAdmin
import APNSConfig
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport

/// The admin server on a real socket: HTTP requests with curl, and the HTML page opened in
/// headless Chromium, its screenshot checked for the two tables' header colours and its DOM for
/// the bundle row and the dead-job rows.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"))
struct AdminBrowserTests {
    static let chromium = "/usr/bin/chromium"
    static let curl = "/usr/bin/curl"
    /// The header colours of `Templates.statusPage`.
    static let bundleHeaderColour = "0,102,204"
    static let deadJobsHeaderColour = "204,51,0"

    /// Runs a second `AdminService` of the harness's worker on a free port for `body`.
    static func serving(_ harness: AdminHarness, _ body: (Int) async throws -> Void) async throws {
        let port = Mutex<Int?>(nil)
        let admin = try AdminService(
            settings: AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: AdminHarness.token),
            worker: harness.worker, queues: harness.queues, registry: TestMetrics.registry, logger: AdminHarness.logger,
            onListening: { bound in port.withLock { $0 = bound } })
        let group = ServiceGroup(services: [admin], logger: AdminHarness.logger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            do {
                try await waitUntil("the admin server to listen") { port.withLock { $0 } != nil }
                try await body(port.withLock { $0! })
            } catch {
                await group.triggerGracefulShutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    /// `curl` status code and body.
    static func get(_ url: String, bearer: Bool) async throws -> (status: Int, body: String) {
        var arguments = ["-sS", "-o", "-", "-w", "\n%{http_code}", url]
        if bearer { arguments += ["-H", "Authorization: Bearer \(AdminHarness.token)"] }
        let result = try await runProcess(curl, arguments)
        guard result.status == 0, let newline = result.stdout.lastIndex(of: "\n") else {
            throw TestSupportError("curl \(url) failed: \(result.stderr)")
        }
        return (Int(result.stdout[result.stdout.index(after: newline)...]) ?? 0, String(result.stdout[..<newline]))
    }

    @Test func servesOverARealSocket() async throws {
        try await AdminHarness.with { harness in
            try await harness.publishJob(token: 1)
            try await waitUntil("the job to be delivered") { harness.jobs("delivered") == 1 }
            try await Self.serving(harness) { port in
                let base = "http://127.0.0.1:\(port)"
                await #expect(try Self.get(base + "/health", bearer: false) == (200, "ok\n"))
                await #expect(try Self.get(base + "/ready", bearer: false).status == 401)
                let ready = try await Self.get(base + "/ready", bearer: true)
                #expect(ready.status == 200)
                #expect(ready.body.contains(#""ready" : true"#))
                let status = try await Self.get(base + "/api/status", bearer: true)
                #expect(status.status == 200)
                #expect(status.body.contains(harness.bundle))
                let metrics = try await Self.get(base + "/metrics", bearer: true)
                #expect(metrics.status == 200)
                let parsed = try PrometheusText.parse(metrics.body)
                #expect(parsed.value("apns_worker_jobs_total", ["bundle": harness.bundle, "outcome": "delivered"]) == 1)
            }
        }
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: chromium), "chromium is not installed (scripts/install-deps.sh installs it)"))
    func thePageInHeadlessChromium() async throws {
        try await AdminHarness.with { harness in
            for n in 0..<2 { try await harness.publishJob(token: n) }
            let dead = [try await harness.publishMalformedJob(), try await harness.publishMalformedJob(), try await harness.publishMalformedJob()]
            try await waitUntil("jobs to reach their ends") { harness.jobs("delivered") == 2 && harness.jobs("dead") == 3 }
            try await Self.serving(harness) { port in
                let directory = harness.directory + "/chromium"
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                // /login sets the cookie and redirects to the page, as an operator's browser does.
                let url = "http://127.0.0.1:\(port)/login?token=\(AdminHarness.token)"
                let common = [
                    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                    "--user-data-dir=\(directory)/profile", "--window-size=1280,1024",
                ]

                let dom = try await runProcess(Self.chromium, common + ["--dump-dom", url])
                #expect(dom.status == 0, "chromium --dump-dom: \(dom.stderr.suffix(500))")
                #expect(dom.stdout.contains(#"<tr class="bundle-row" data-bundle="\#(harness.bundle)">"#))
                for id in dead {
                    #expect(dom.stdout.contains(#"<tr class="dead-job" data-job-id="\#(id)">"#), "dead job \(id) in the DOM")
                    #expect(dom.stdout.contains(#"action="/dead/\#(id)/requeue""#))
                }
                // The job's markup arrived as text: the DOM has no script or b element from it.
                #expect(!dom.stdout.contains("<script>"))
                #expect(!dom.stdout.contains("<b>bogus</b>"))
                #expect(dom.stdout.contains("&lt;script&gt;alert('x')&lt;/script&gt;"))

                let screenshot = directory + "/page.png"
                let shot = try await runProcess(Self.chromium, common + ["--screenshot=\(screenshot)", url])
                #expect(shot.status == 0, "chromium --screenshot: \(shot.stderr.suffix(500))")
                // For a person to look at: APNS_TEST_SCREENSHOT=/path/page.png keeps a copy.
                if let keep = ProcessInfo.processInfo.environment["APNS_TEST_SCREENSHOT"] {
                    try? FileManager.default.removeItem(atPath: keep)
                    try FileManager.default.copyItem(atPath: screenshot, toPath: keep)
                }
                let colours = try await runProcess(
                    "/usr/bin/env",
                    ["python3", repositoryRoot + "/Tests/APNSAdminTests/Scripts/png_colors.py", screenshot, Self.bundleHeaderColour, Self.deadJobsHeaderColour])
                #expect(colours.status == 0, "png_colors.py: \(colours.stderr)")
                var counts: [String: Int] = [:]
                for line in colours.stdout.split(separator: "\n") {
                    let parts = line.split(separator: " ")
                    if parts.count == 2 { counts[String(parts[0])] = Int(parts[1]) }
                }
                // Each header row is 14 or 10 cells wide and ~20 px high: thousands of pixels.
                #expect((counts[Self.bundleHeaderColour] ?? 0) > 2000, "bundle table header pixels: \(counts)")
                #expect((counts[Self.deadJobsHeaderColour] ?? 0) > 2000, "dead-job table header pixels: \(counts)")
            }
        }
    }
}
