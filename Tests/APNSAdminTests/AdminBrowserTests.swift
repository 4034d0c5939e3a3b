import AMQPClient
import APNSAdmin
import APNSConfig
import APNSFleet
import APNSModel
import APNSSimulator
import APNSWorker
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport

/// The admin server on a real socket: HTTP requests with curl, and the HTML page opened in
/// headless Chromium with a fleet service running, its screenshot checked for the header
/// colours of the instances, bundles, retry and dead-job tables and for the live graph's plot
/// area, and its DOM for the rows. The window is a small laptop's width (1,366 px): every
/// table's header must end left of the page's right margin there, so none runs past the edge.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"))
struct AdminBrowserTests {
    static let chromium = "/usr/bin/chromium"
    static let curl = "/usr/bin/curl"
    /// The header colours of `Templates.statusPage`.
    static let bundleHeaderColour = "0,102,204"
    static let deadJobsHeaderColour = "204,51,0"
    static let instancesHeaderColour = "0,128,0"
    static let retryJobsHeaderColour = "128,0,160"
    /// The plot area of `FleetGraph`.
    static let graphColour = "235,242,250"
    /// The frame of the held and paused banners.
    static let alertColour = "204,0,0"
    /// The narrowest laptop screen the page is drawn for, and the body's margin (`Templates`).
    static let laptopWidth = 1366
    static let pageMargin = 16

    /// Runs a second `AdminService` of the harness's worker on a free port for `body`.
    /// With `fleet`, that fleet service runs beside it (heartbeats on the harness's worker connection).
    static func serving(
        _ harness: AdminHarness, fleet: FleetService<AMQPConnection>? = nil, token: String? = AdminHarness.token,
        metricsToken: String? = nil, _ body: (Int) async throws -> Void
    ) async throws {
        var settings = AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: token)
        settings.metricsToken = metricsToken
        try await servingAdmin(extra: fleet.map { [$0] } ?? [], { [settings] onListening in
            try AdminService(
                settings: settings,
                worker: harness.worker, queues: harness.queues, prometheus: TestMetrics.prometheus, logger: AdminHarness.logger, fleet: fleet,
                onListening: onListening)
        }, body)
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
            // A 5 s beat: an instance is silent after three intervals, and on a loaded machine
            // (Chromium starting beside every other suite) a 1 s beat's echo came back late
            // enough that this instance left its own page.
            let fleet = FleetService(
                broker: harness.workerConnection, worker: harness.worker, identity: .current(version: "0.1.0"), interval: .seconds(5),
                logger: AdminHarness.logger)
            // Loopback without a token (the page needs no login): a browser cannot be handed a
            // session cookie from the command line, and a login form posted from a file:// page
            // is the cross-site POST the admin refuses.
            try await Self.serving(harness, fleet: fleet, token: nil) { port in
                // Jobs after the first heartbeat, so the graph has something to draw.
                try await waitUntil("this instance's first heartbeat") { fleet.report().instances.contains { $0.id == fleet.identity.instanceID } }
                let failing = 77
                harness.simulator.script(token: AdminHarness.token(failing), .always(status: 500, reason: .internalServerError))
                for n in 0..<40 { try await harness.publishJob(token: n) }
                let retried = [try await harness.publishJob(token: failing), try await harness.publishJob(token: failing)]
                let dead = [try await harness.publishMalformedJob(), try await harness.publishMalformedJob(), try await harness.publishMalformedJob()]
                try await waitUntil("jobs to reach their ends") {
                    harness.jobs("delivered") == 40 && harness.jobs("dead") == 3 && harness.jobs("retry") == 2
                }
                try await waitUntil("the fleet view to count them") {
                    let totals = fleet.snapshot().totals(now: Date())[harness.bundle]
                    return totals?.delivered == 40 && totals?.retry == 2
                }
                // The graph draws complete 10-second steps: wait for the one with the deliveries.
                try await waitUntil("the graph to draw the deliveries") {
                    fleet.snapshot().rates.series(now: Date()).contains { ($0.perSecond[.delivered] ?? 0) > 0 }
                }
                let svg = try await Self.get("http://127.0.0.1:\(port)/fleet/graph.svg", bearer: true)
                let delivered = try #require(svg.body.split(separator: "\n").first { $0.contains(#"data-end="delivered""#) })
                let heights = Set(delivered.split(separator: " ").compactMap { $0.split(separator: ",").last.flatMap { Double($0.prefix { $0 != "\"" }) } })
                #expect(heights.count > 1, "the delivered line leaves the baseline: \(delivered)")
                let directory = harness.directory + "/chromium"
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                let url = "http://127.0.0.1:\(port)/"
                let common = [
                    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                    // Tall: on a shared test broker every other suite's workers are in the fleet
                    // too, and their rows push the retry and dead tables down the page.
                    "--user-data-dir=\(directory)/profile", "--window-size=\(Self.laptopWidth),8000",
                ]

                let dom = try await runProcess(Self.chromium, common + ["--dump-dom", url])
                #expect(dom.status == 0, "chromium --dump-dom: \(dom.stderr.suffix(500))")
                #expect(dom.stdout.contains(#"<tr class="bundle-row" data-bundle="\#(harness.bundle)">"#))
                #expect(dom.stdout.contains(#"<tr class="instance-row" data-instance="\#(fleet.identity.instanceID)">"#))
                #expect(dom.stdout.contains(#"<iframe id="graph-frame" src="/fleet/graph""#))
                for id in retried {
                    #expect(dom.stdout.contains(#"<tr class="retry-job" data-job-id="\#(id)">"#), "retry job \(id) in the DOM")
                    #expect(dom.stdout.contains(#"action="/retry/\#(id)/requeue""#))
                    #expect(dom.stdout.contains(#"action="/retry/\#(id)/purge""#))
                }
                for id in dead {
                    #expect(dom.stdout.contains(#"<tr class="dead-job" data-job-id="\#(id)">"#), "dead job \(id) in the DOM")
                    #expect(dom.stdout.contains(#"action="/dead/\#(id)/requeue""#))
                }
                // The job's markup arrived as text: the DOM has no script or b element from it.
                #expect(!dom.stdout.contains("<script>"))
                #expect(!dom.stdout.contains("<b>bogus</b>"))
                #expect(dom.stdout.contains("&lt;script&gt;alert('x')&lt;/script&gt;"))
                // A dead job's long error is one cut line, the whole of it a click away.
                #expect(dom.stdout.contains(#"<td class="error"><details class="cut"><summary>pushType: unknown push type"#))

                let colours = [Self.bundleHeaderColour, Self.deadJobsHeaderColour, Self.instancesHeaderColour, Self.retryJobsHeaderColour, Self.graphColour]
                var shot = try await Self.screenshotColours(url, options: common, path: directory + "/page.png", keepAs: "", colours)
                // A full CI once drew the page without its last two tables (retry and dead jobs,
                // both in the DOM above) on a machine at load 45: a screenshot taken before the
                // layout was done, or a page taller than the window. Taken again a few times,
                // saying how long the page is, so that only a page that never fits fails.
                for _ in 0..<3 where (shot.counts[Self.deadJobsHeaderColour] ?? 0) == 0 || (shot.counts[Self.retryJobsHeaderColour] ?? 0) == 0 {
                    let rows = dom.stdout.components(separatedBy: "<tr").count - 1
                    print("admin page screenshot without the job tables (\(rows) table rows in the DOM); taking it again")
                    try await Task.sleep(for: .seconds(2))
                    shot = try await Self.screenshotColours(url, options: common, path: directory + "/page.png", keepAs: "", colours)
                }
                let counts = shot.counts
                // Every table within the window: its header's rightmost pixel left of the body's
                // right margin (with --hide-scrollbars a wider table is cut at the window's edge,
                // its header reaching the screenshot's last column).
                #expect(shot.width == Self.laptopWidth, "screenshot width \(shot.width)")
                for colour in [Self.instancesHeaderColour, Self.bundleHeaderColour, Self.retryJobsHeaderColour, Self.deadJobsHeaderColour] {
                    let right = shot.rightmost[colour] ?? -1
                    #expect(right >= 0 && right < Self.laptopWidth - Self.pageMargin, "table header \(colour) ends at x = \(right), past the page's right margin at \(Self.laptopWidth) px")
                }
                // Each header row is 10 to 16 cells wide and ~20 px high: thousands of pixels.
                #expect((counts[Self.bundleHeaderColour] ?? 0) > 2000, "bundle table header pixels: \(counts)")
                #expect((counts[Self.deadJobsHeaderColour] ?? 0) > 2000, "dead-job table header pixels: \(counts)")
                #expect((counts[Self.instancesHeaderColour] ?? 0) > 2000, "instances table header pixels: \(counts)")
                #expect((counts[Self.retryJobsHeaderColour] ?? 0) > 2000, "retry table header pixels: \(counts)")
                // The plot area is 694 × 220 px; lines and grid cross it, most of it stays bare.
                #expect((counts[Self.graphColour] ?? 0) > 50000, "graph plot-area pixels: \(counts)")

                // Paused fleet-wide: every page says so at the top, in a red frame.
                try await fleet.setPaused(harness.bundle, true)
                try await waitUntil("the fleet report to list the bundle as paused") { fleet.report().paused.contains(harness.bundle) }
                let pausedDOM = try await runProcess(Self.chromium, common + ["--dump-dom", url])
                #expect(pausedDOM.stdout.contains(#"<p class="alert" id="paused-alert">"#))
                #expect(pausedDOM.stdout.contains(#"<td class="held">PAUSED</td>"#))
                // The banner is at the top: a short window is enough (and quicker to count).
                let short = common.map { $0.hasPrefix("--window-size=") ? "--window-size=\(Self.laptopWidth),1000" : $0 }
                let paused = try await Self.screenshotColours(
                    url, options: short, path: directory + "/paused.png", keepAs: "-paused", [Self.alertColour]).counts
                // The banner's 3-px frame alone is ~8,000 px.
                #expect((paused[Self.alertColour] ?? 0) > 4000, "alert frame pixels: \(paused)")
                try await fleet.setPaused(harness.bundle, false)
            }
        }
    }

    /// What `png_colors.py` found in a screenshot: its width, and per colour the pixels of it and
    /// the largest x of one.
    struct Colours {
        var width = 0
        var counts: [String: Int] = [:]
        var rightmost: [String: Int] = [:]
    }

    /// Takes a screenshot of `url` and counts the pixels of each colour in it. With
    /// `APNS_TEST_SCREENSHOT=/path/page.png`, a copy is kept for a person to look at (named with
    /// `keepAs` before the extension).
    static func screenshotColours(_ url: String, options: [String], path: String, keepAs suffix: String, _ colours: [String]) async throws -> Colours {
        let shot = try await runProcess(Self.chromium, options + ["--screenshot=\(path)", url])
        #expect(shot.status == 0, "chromium --screenshot: \(shot.stderr.suffix(500))")
        if let keep = ProcessInfo.processInfo.environment["APNS_TEST_SCREENSHOT"] {
            let target = suffix.isEmpty ? keep : keep.replacingOccurrences(of: ".png", with: "\(suffix).png")
            try? FileManager.default.removeItem(atPath: target)
            try FileManager.default.copyItem(atPath: path, toPath: target)
        }
        let result = try await runProcess(
            "/usr/bin/env", ["python3", repositoryRoot + "/Tests/APNSAdminTests/Scripts/png_colors.py", path] + colours)
        #expect(result.status == 0, "png_colors.py: \(result.stderr)")
        var found = Colours()
        for line in result.stdout.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 3 else { continue }
            if parts[0] == "size" {
                found.width = Int(parts[1]) ?? 0
            } else {
                found.counts[String(parts[0])] = Int(parts[1])
                found.rightmost[String(parts[0])] = Int(parts[2])
            }
        }
        return found
    }
}
