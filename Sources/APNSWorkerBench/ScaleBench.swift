/// `apns-worker-bench scale`: what the worker costs as the work grows. Real
/// `apns-worker run` processes against a real broker and the in-process simulator:
/// - `bundles`: the same total of jobs spread over 1, 10 and 50 bundles (one queue each), of one
///   team (one shared connection pool) or with `--teams each` a team per bundle (a
///   pool each): cost per job, connections to the sink, start-up, and resident memory per added
///   bundle;
/// - `instances`: 1, 2 and 4 worker processes draining the same 20 bundles: what one more
///   instance buys on this machine;
/// - `idle`: an instance with 50 bundles and nothing to do, its CPU and memory per second.
/// Every case prints jobs/s, CPU µs per job, peak RSS and p99 publish → APNs 200.
import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopology
import ArgumentParser
import Foundation
import Logging

struct ScaleBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale",
        abstract: "Cost as the work grows: many bundles, several instances, an idle fleet.")

    enum Case: String, ExpressibleByArgument, CaseIterable {
        case bundles, instances, idle
    }

    @Argument(help: "bundles | instances | idle")
    var scaleCase: Case

    @Option(help: "AMQP URL of a running broker (scripts/broker.sh start).")
    var url: String = ProcessInfo.processInfo.environment["APNS_TEST_AMQP_URL"] ?? "amqp://guest:guest@127.0.0.1:5682/%2f"

    @Option(help: "Jobs per run, spread evenly over the bundles (bundles, instances).")
    var jobs: Int = 20_000

    @Option(help: "Bundle counts of the `bundles` case, comma-separated.")
    var bundleCounts: String = "1,10,50"

    @Option(help: "Teams of the `bundles` case, comma-separated: `one` (every bundle of one team key) and/or `each` (a team per bundle).")
    var teams: String = "one"

    @Option(help: "Worker processes of the `instances` case, comma-separated.")
    var instanceCounts: String = "1,2,4"

    @Option(help: "Bundles of the `instances` case (default 20) or of the `idle` case (default 50).")
    var bundles: Int?

    @Option(help: "Jobs per second in the latency phase after each drain (0: none).")
    var rate: Int = 500

    @Option(help: "Seconds of the latency phase.")
    var latencySeconds: Int = 5

    @Option(help: "Seconds the idle instance is watched, after `--warm-up` seconds.")
    var idleSeconds: Int = 30

    @Option(help: "Seconds an idle instance gets to connect before it is watched.")
    var warmUp: Int = 10

    @Flag(help: "Print the first instance's resident memory by mapping and its threads at the end of each drain.")
    var smaps = false

    @Option(name: .customLong("bundle-key"), help: "A key for every bundle's section, e.g. `connections = 1` (repeatable).")
    var bundleKeys: [String] = []

    @Option(name: .customLong("amqp-key"), help: "A key for the `[amqp]` section, e.g. `prefetch = 100` (repeatable).")
    var amqpKeys: [String] = []

    func run() async throws {
        var logger = Logger(label: "bench")
        logger.logLevel = .warning
        switch scaleCase {
        case .bundles:
            for teamPerBundle in try teamModes() {
                var results: [ScaleResult] = []
                for count in try counts(bundleCounts) {
                    results.append(try await drain(bundles: count, instances: 1, teamPerBundle: teamPerBundle, logger: logger))
                }
                ScaleResult.printTable(results)
                if let first = results.first, let last = results.last, last.bundles > first.bundles {
                    let perBundle = (last.peakRSS.max()! - first.peakRSS.max()!) / Double(last.bundles - first.bundles)
                    print("peak RSS per added bundle: \(String(format: "%.2f", perBundle)) MiB (\(first.bundles) → \(last.bundles) bundles)")
                }
            }
        case .instances:
            var results: [ScaleResult] = []
            for count in try counts(instanceCounts) {
                results.append(try await drain(bundles: bundles ?? 20, instances: count, logger: logger))
            }
            ScaleResult.printTable(results)
        case .idle:
            try await idle(bundles: bundles ?? 50, logger: logger)
        }
    }

    /// `--teams` as whether each bundle has a team of its own, in the order given.
    private func teamModes() throws -> [Bool] {
        try teams.split(separator: ",").map { mode in
            switch mode.trimmingCharacters(in: .whitespaces) {
            case "one": false
            case "each": true
            default: throw ValidationError("--teams: \(mode) is neither `one` nor `each`")
            }
        }
    }

    private func counts(_ list: String) throws -> [Int] {
        let values = list.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !values.isEmpty, values.allSatisfy({ $0 > 0 }) else { throw ValidationError("not a list of positive counts: \(list)") }
        return values
    }

    /// Preloads `jobs` over `bundles` bundles, drains them with `instances` workers, then
    /// publishes at `rate` for the latency.
    private func drain(bundles: Int, instances: Int, teamPerBundle: Bool = false, logger: Logger) async throws -> ScaleResult {
        let run = try await ScaleRun.start(
            bundles: bundles, recordLimit: rate * latencySeconds + 10, teamPerBundle: teamPerBundle, bench: self, logger: logger)
        defer { run.setup.remove() }
        print("\(bundles) bundles (\(teamPerBundle ? "a team each" : "one team")), \(instances) instance(s): preloading \(jobs) jobs …")
        try await run.publish(count: jobs)
        let started = ContinuousClock.now
        let workers = try (0..<instances).map { _ in try run.setup.startWorker(configPath: run.configPath) }
        let probes = workers.map { ProcessProbe(pid: $0.processIdentifier) }
        // Start-up (spawn to the first notification APNs accepted: connections, topology, consumers)
        // apart from the drain, as the kit counts them: at 50 bundles start-up opens 100 TLS
        // connections, a cost per instance, not per job.
        try await BenchWorkerSetup.waitUntil(limit: .seconds(900)) { run.setup.simulator.counters().accepted >= 1 }
        let firstAccepted = ContinuousClock.now
        let startupCPU = probes.map { $0.cpuSeconds() }.reduce(0, +)
        // The most connections open at once, sampled as the drain is watched (`connections`
        // counts every one accepted, replacements included).
        var peakOpen = 0
        try await BenchWorkerSetup.waitUntil(limit: .seconds(900)) {
            let counters = run.setup.simulator.counters()
            peakOpen = max(peakOpen, counters.openConnections)
            return counters.accepted >= jobs
        }
        let seconds = firstAccepted.duration(to: .now).timeInterval
        let cpu = probes.map { $0.cpuSeconds() }.reduce(0, +) - startupCPU
        let peaks = probes.map { $0.peakRSS() }
        let connections = run.setup.simulator.counters().connections
        if smaps, let probe = probes.first { printBreakdown(probe) }

        var latencies: [Double] = []
        if rate > 0 {
            run.setup.simulator.clearAccepted()
            latencies = try await run.latencies(rate: rate, seconds: latencySeconds)
        }
        for worker in workers { worker.terminate() }
        for worker in workers { worker.waitUntilExit() }
        try await run.finish()
        return ScaleResult(
            bundles: bundles, instances: instances, teams: teamPerBundle ? bundles : 1, connections: connections, peakOpen: peakOpen,
            jobs: jobs, seconds: seconds, cpuSeconds: cpu,
            startupSeconds: started.duration(to: firstAccepted).timeInterval, startupCPUSeconds: startupCPU, peakRSS: peaks,
            p99: latencies.isEmpty ? nil : LatencySample(latencies).percentile(0.99))
    }

    /// One instance with `bundles` bundles and empty queues: CPU, memory and threads while it waits.
    private func idle(bundles: Int, logger: Logger) async throws {
        let run = try await ScaleRun.start(bundles: bundles, recordLimit: 0, bench: self, logger: logger)
        defer { run.setup.remove() }
        let worker = try run.setup.startWorker(configPath: run.configPath)
        let probe = ProcessProbe(pid: worker.processIdentifier)
        try await Task.sleep(for: .seconds(warmUp))
        let cpuBefore = probe.cpuSeconds()
        let rssBefore = probe.rss()
        let watched = ContinuousClock.now
        try await Task.sleep(for: .seconds(idleSeconds))
        let cpu = probe.cpuSeconds() - cpuBefore
        let seconds = watched.duration(to: .now).timeInterval
        let threads = probe.threadsByName()
        print("""
            idle, \(bundles) bundles, watched \(Int(seconds)) s after \(warmUp) s: \
            CPU \(String(format: "%.3f", cpu * 100 / seconds)) % of a core (\(String(format: "%.2f", cpu * 1000 / seconds)) ms/s), \
            RSS \(String(format: "%.1f", rssBefore)) → \(String(format: "%.1f", probe.rss())) MiB, \
            peak \(String(format: "%.1f", probe.peakRSS())) MiB, \
            \(threads.map(\.count).reduce(0, +)) threads, \(run.setup.simulator.counters().openConnections) APNs connections open
            """)
        if smaps { printBreakdown(probe) }
        worker.terminate()
        worker.waitUntilExit()
        try await run.finish()
    }

    private func printBreakdown(_ probe: ProcessProbe) {
        let regions = probe.residentByMapping()
        let total = regions.map(\.kib).reduce(0, +)
        print("  resident by mapping (\(String(format: "%.1f", Double(total) / 1024)) MiB):")
        for (mapping, kib) in regions where kib >= 256 {
            print("    \(String(format: "%6.1f", Double(kib) / 1024)) MiB  \(mapping)")
        }
        let rest = regions.filter { $0.kib < 256 }.map(\.kib).reduce(0, +)
        print("    \(String(format: "%6.1f", Double(rest) / 1024)) MiB  everything under 0.25 MiB each")
        let threads = probe.threadsByName()
        print("  threads (\(threads.map(\.count).reduce(0, +))): " + threads.map { "\($0.name) ×\($0.count)" }.joined(separator: ", "))
    }
}

/// What one drain measured.
struct ScaleResult {
    var bundles: Int
    var instances: Int
    /// Teams (token keys) the bundles belong to: 1, or one per bundle.
    var teams: Int
    /// TLS connections the simulator accepted from spawn to the end of the drain, and the most
    /// open at once during the drain.
    var connections: Int
    var peakOpen: Int
    var jobs: Int
    /// First notification accepted to the last: the drain.
    var seconds: Double
    /// The workers' CPU inside the drain.
    var cpuSeconds: Double
    /// Spawn to the first notification accepted, and the workers' CPU in it.
    var startupSeconds: Double
    var startupCPUSeconds: Double
    /// Peak RSS of each instance, MiB.
    var peakRSS: [Double]
    var p99: Double?

    static func printTable(_ results: [ScaleResult]) {
        print("jobs/s and CPU µs/job: inside the drain (first notification accepted to the last); start-up: spawn to the first")
        print(
            "| bundles | teams | instances | jobs | jobs/s | CPU µs/job (vs first row) | APNs connections (most open at once) | start-up s (CPU s) "
                + "| peak RSS per instance (MiB) | p99 publish → 200 (ms) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        let baseline = results.first.map { $0.cpuSeconds / Double($0.jobs) }
        for r in results {
            let rss = r.peakRSS.map { String(format: "%.1f", $0) }.joined(separator: ", ")
            let p99 = r.p99.map { String(format: "%.1f", $0) } ?? "-"
            let startup = String(format: "%.2f (%.2f)", r.startupSeconds, r.startupCPUSeconds)
            let perJob = r.cpuSeconds / Double(r.jobs)
            let versus = baseline.map { String(format: "%+.0f %%", (perJob / $0 - 1) * 100) } ?? "-"
            print(
                "| \(r.bundles) | \(r.teams) | \(r.instances) | \(r.jobs) | \(Int(Double(r.jobs) / r.seconds)) | "
                    + "\(String(format: "%.1f", perJob * 1e6)) (\(versus)) | \(r.connections) (\(r.peakOpen)) | \(startup) | \(rss) | \(p99) |")
        }
    }
}
