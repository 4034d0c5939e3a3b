@testable import APNSAdmin
import APNSOperations
import APNSWorker
import Foundation
import Prometheus
import Testing
import TestSupport

/// The rules of deploy/prometheus/ evaluated by a real Prometheus (Debian's package, installed
/// by scripts/install-deps.sh) scraping a running worker's admin server: every rule evaluates
/// without error against the real /metrics, the recording rules see the worker's queues, and one
/// dead job raises nothing (`ApnsWorkerDeadJobsRising` waits for jobs that keep dying). promtool's unit tests
/// (scripts/check-prometheus.sh) cover each alert's thresholds; this covers the metric names.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"))
struct PrometheusRulesTests {
    static let prometheus = "/usr/bin/prometheus"
    static let rules = repositoryRoot + "/deploy/prometheus/apns-worker.rules.yml"
    /// Prometheus scrapes with the read-only `[admin] metricsToken`, as deploy/ tells operators to.
    static let metricsToken = "test-metrics-token-0123456789"

    /// A Prometheus on a free loopback port with a throwaway data directory, scraping the admin
    /// server on `adminPort` every 2 s with the rules loaded (evaluated every second); always
    /// stopped and removed. The scrape reads the queues' depths from the broker, and a 1 s
    /// timeout failed a scrape in every full run; for tens of seconds once, and the recorded
    /// consumer count stayed empty.
    static func withPrometheus(scraping adminPort: Int, _ body: (String) async throws -> Void) async throws {
        let directory = NSTemporaryDirectory() + "apnsw-prometheus-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory + "/data", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try metricsToken.write(toFile: directory + "/token", atomically: true, encoding: .utf8)
        let configuration = """
            global:
              scrape_interval: 2s
              scrape_timeout: 2s
              evaluation_interval: 1s
            rule_files: ["\(rules)"]
            scrape_configs:
              - job_name: apns-worker
                authorization:
                  credentials_file: \(directory)/token
                static_configs:
                  - targets: ["127.0.0.1:\(adminPort)"]
            """
        try configuration.write(toFile: directory + "/prometheus.yml", atomically: true, encoding: .utf8)
        let port = try serverPort()
        let server = try ChildProcess(
            prometheus,
            [
                "--config.file=\(directory)/prometheus.yml", "--storage.tsdb.path=\(directory)/data",
                "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn",
            ],
            logPath: directory + "/prometheus.log")
        defer { server.kill9() }
        let base = "http://127.0.0.1:\(port)"
        do {
            try await waitUntil("Prometheus to answer", timeout: .seconds(180)) {
                guard server.isRunning else { throw TestSupportError("prometheus exited: \(server.log)") }
                return (try? await AdminBrowserTests.get(base + "/-/ready", bearer: false).status) == 200
            }
            try await body(base)
        } catch {
            Issue.record("prometheus log: \(server.log)")
            throw error
        }
        server.signal(SIGTERM)
        _ = await server.waitForExit(timeout: .seconds(30))
    }

    /// The samples of an instant query: labels and value of each.
    static func query(_ base: String, _ promql: String) async throws -> [(labels: [String: String], value: Double)] {
        let encoded = promql.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let answer = try await AdminBrowserTests.get(base + "/api/v1/query?query=" + encoded, bearer: false)
        guard answer.status == 200, let json = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any],
            let data = json["data"] as? [String: Any], let result = data["result"] as? [[String: Any]]
        else { throw TestSupportError("query \(promql): \(answer.status) \(answer.body)") }
        return result.map { sample in
            let value = (sample["value"] as? [Any])?.last as? String
            return (sample["metric"] as? [String: String] ?? [:], Double(value ?? "") ?? .nan)
        }
    }

    /// Every rule of every group as Prometheus reports it (name, health, last error).
    static func ruleHealth(_ base: String) async throws -> [(name: String, health: String, error: String)] {
        let answer = try await AdminBrowserTests.get(base + "/api/v1/rules", bearer: false)
        guard let json = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any],
            let groups = (json["data"] as? [String: Any])?["groups"] as? [[String: Any]]
        else { throw TestSupportError("rules: \(answer.body)") }
        return groups.flatMap { ($0["rules"] as? [[String: Any]]) ?? [] }.map {
            ($0["name"] as? String ?? "?", $0["health"] as? String ?? "?", $0["lastError"] as? String ?? "")
        }
    }

    @Test func rulesEvaluateAgainstARunningWorker() async throws {
        try await AdminHarness.with { harness in
            try await harness.publishJob(token: 1)
            try await waitUntil("the job to be delivered") { harness.jobs("delivered") == 1 }
            try await AdminBrowserTests.serving(harness, metricsToken: Self.metricsToken) { adminPort in
                try await Self.withPrometheus(scraping: adminPort) { base in
                    let b = harness.bundle
                    // Two successful scrapes with the metrics token (up is 0 for a refused one).
                    try await waitUntil("two scrapes of the worker", timeout: .seconds(180)) {
                        try await Self.query(base, #"sum_over_time(up{job="apns-worker"}[1m]) >= 2"#).count == 1
                    }
                    try await harness.publishMalformedJob()
                    try await waitUntil("the malformed job to be dead") { harness.jobs("dead") == 1 }
                    // One dead job pages nobody. Prometheus has scraped it (the
                    // counter's rise is in the window ApnsWorkerDeadJobsRising reads), and the
                    // alert's threshold leaves it out.
                    try await waitUntil("the dead job in Prometheus", timeout: .seconds(60)) {
                        try await Self.query(base, #"sum by (bundle) (increase(apns_worker_jobs_total{outcome="dead",bundle="\#(b)"}[15m])) > 0"#).count == 1
                    }
                    let deadAlert = try await Self.query(
                        base, #"sum by (bundle) (increase(apns_worker_jobs_total{outcome="dead",bundle="\#(b)"}[15m])) > 10"#)
                    #expect(deadAlert.isEmpty, "\(deadAlert)")
                    // Every rule evaluated, none with an error (a wrong name would give empty results,
                    // checked below; a wrong type or expression an error here).
                    try await waitUntil("every rule to be evaluated") {
                        try await Self.ruleHealth(base).allSatisfy { $0.health != "unknown" }
                    }
                    let health = try await Self.ruleHealth(base)
                    #expect(health.count == 23)
                    for rule in health where rule.health != "ok" {
                        Issue.record("rule \(rule.name): \(rule.health) \(rule.error)")
                    }
                    // The recording rules see the worker's real series (polled: the rule has a
                    // value only after a scrape that saw the consumer and an evaluation after it;
                    // read once, it was still empty on a loaded machine).
                    try await waitUntil("the worker's consumer in the recorded consumer count", timeout: .seconds(120)) {
                        try await Self.query(base, #"apns_worker:queue_consumers:max{bundle="\#(b)",role="work"}"#).map(\.value) == [1]
                    }
                    // The alert fires on the jobs counter; the depth reaches the rule with a later
                    // scrape and evaluation (1 s each), so it is polled, not read once.
                    try await waitUntil("the dead job in the recorded dead queue depth", timeout: .seconds(120)) {
                        try await Self.query(base, #"apns_worker:queue_messages:max{bundle="\#(b)",role="dead"}"#).map(\.value) == [1]
                    }
                    // Recorded from a recorded series (the retry depth), so it too takes a scrape
                    // and an evaluation after it: polled (read once, CI saw it still empty).
                    try await waitUntil("the empty retry backlog's age in the recorded rule", timeout: .seconds(120)) {
                        try await Self.query(base, #"apns_worker:retry_backlog_age_seconds{bundle="\#(b)"}"#).map(\.value) == [0]
                    }
                    // Recorded rules too: polled, for the same reason.
                    try await waitUntil("every end in the recorded jobs rate", timeout: .seconds(120)) {
                        let outcomes = try await Self.query(base, #"apns_worker:jobs:rate5m{bundle="\#(b)"}"#).compactMap { $0.labels["outcome"] }
                        return Set(outcomes).isSuperset(of: ["delivered", "dead", "retry", "invalid_token"])
                    }
                    try await waitUntil("the recorded p99 of the job duration", timeout: .seconds(120)) {
                        try await Self.query(base, #"apns_worker:job_duration_seconds:p99_5m{bundle="\#(b)"}"#).count == 1
                    }
                    // Nothing fires or is pending for this healthy worker, one dead job included
                    // (other tests of this process leave their bundles' last values in the shared
                    // metrics registry, and other tests' jobs for unconfigured bundles may reach
                    // apns.unrouted on the shared broker meanwhile).
                    // A scrape that outlived its 2 s timeout on a loaded machine makes `up` 0 for
                    // one interval, and the two alerts on `up` pending for it (CI saw it once):
                    // they are left out only when Prometheus recorded such a failed scrape.
                    // The latency alert is left out too: its p99 over this test's four jobs is the
                    // slowest of them, the first one's HTTP/2 connection and provider token
                    // included, and a debug build beside the other suites took over its 2 s once
                    // (CI). That it fires on a slow bundle is the rules' unit tests' to show.
                    let failedScrapes = try await Self.query(base, #"min_over_time(up{job="apns-worker"}[10m]) == 0"#)
                    let latency = #",alertname!="ApnsWorkerDeliveryLatencyHigh""#
                    let scrapeAlerts = latency + (failedScrapes.isEmpty ? "" : #",alertname!~"ApnsWorkerAbsent|ApnsWorkerInstanceDown""#)
                    let others = try await Self.query(
                        base, #"ALERTS{bundle="\#(b)"\#(scrapeAlerts)} or ALERTS{bundle="",alertname!="ApnsWorkerUnroutedGrowing"\#(scrapeAlerts)}"#)
                    #expect(others.isEmpty, "\(others)")
                    if !failedScrapes.isEmpty {
                        let durations = try await Self.query(base, #"max_over_time(scrape_duration_seconds{job="apns-worker"}[10m])"#)
                        print("[prometheus] a scrape of the worker failed; longest scrape \(durations.map(\.value)) s")
                    }
                }
            }
        }
    }

    /// Depths the broker did not answer become NaN, so no alert compares a stale number.
    @Test func unreadableDepthsAreNaN() async throws {
        _ = TestMetrics.prometheus
        let metrics = AdminMetrics()
        let bundle = uniqueName("com.example.nan")
        metrics.sample([QueueDepth(queue: "apns.\(bundle)", bundleID: bundle, role: "work", messages: 7, consumers: 2)], bundleIDs: [bundle])
        var samples = try PrometheusText.parse(String(decoding: TestMetrics.prometheus.emitToBuffer(), as: UTF8.self))
        #expect(samples.value("apns_worker_queue_messages", ["bundle": bundle, "role": "work"]) == 7)
        #expect(samples.value("apns_worker_queue_consumers", ["bundle": bundle, "role": "work"]) == 2)
        #expect(samples.value("apns_worker_queue_messages", ["bundle": bundle, "role": "dead"])?.isNaN == true)
        metrics.sample(nil, bundleIDs: [bundle])
        samples = try PrometheusText.parse(String(decoding: TestMetrics.prometheus.emitToBuffer(), as: UTF8.self))
        #expect(samples.value("apns_worker_queue_messages", ["bundle": bundle, "role": "work"])?.isNaN == true)
        #expect(samples.value("apns_worker_queue_consumers", ["bundle": bundle, "role": "work"])?.isNaN == true)
    }

    /// The registry's and groups' dead queues reach /metrics (ApnsWorkerRegistryDeadLetters
    /// reads them) with bundle "", only when the worker runs a registry, NaN when unread.
    @Test func registryDeadQueueDepths() throws {
        _ = TestMetrics.prometheus
        let metrics = AdminMetrics()
        let bundle = uniqueName("com.example.regdead")
        let depths = [
            QueueDepth(queue: "apns.registry.dead", bundleID: "", role: "registry_dead", messages: 4, consumers: 0),
            QueueDepth(queue: "apns.groups.dead", bundleID: "", role: "groups_dead", messages: 2, consumers: 0),
        ]
        metrics.sample(depths, bundleIDs: [bundle], registryQueues: true)
        var samples = try PrometheusText.parse(String(decoding: TestMetrics.prometheus.emitToBuffer(), as: UTF8.self))
        #expect(samples.value("apns_worker_queue_messages", ["bundle": "", "role": "registry_dead"]) == 4)
        #expect(samples.value("apns_worker_queue_messages", ["bundle": "", "role": "groups_dead"]) == 2)
        #expect(samples.value("apns_worker_queue_consumers", ["bundle": "", "role": "groups_dead"]) == 0)
        metrics.sample(nil, bundleIDs: [bundle], registryQueues: true)
        samples = try PrometheusText.parse(String(decoding: TestMetrics.prometheus.emitToBuffer(), as: UTF8.self))
        #expect(samples.value("apns_worker_queue_messages", ["bundle": "", "role": "registry_dead"])?.isNaN == true)
    }

    /// `ApnsWorkerRegistryUnavailable` reads this gauge: 0 while the registry is held.
    @Test func registryAvailability() throws {
        _ = TestMetrics.prometheus
        let metrics = AdminMetrics()
        var status = WorkerStatus(broker: "connected", bundles: [])
        status.registry = "held"
        metrics.sample(status)
        var samples = try PrometheusText.parse(String(decoding: TestMetrics.prometheus.emitToBuffer(), as: UTF8.self))
        #expect(samples.value("apns_worker_registry_available", [:]) == 0)
        status.registry = "ok"
        metrics.sample(status)
        samples = try PrometheusText.parse(String(decoding: TestMetrics.prometheus.emitToBuffer(), as: UTF8.self))
        #expect(samples.value("apns_worker_registry_available", [:]) == 1)
    }
}
