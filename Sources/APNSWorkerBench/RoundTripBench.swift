/// `apns-worker-bench round-trip`: the whole worker at Apple's distance. For each round
/// trip the in-process simulator adds (`SimulatorFaults.latency`, as `apns-worker simulator
/// --latency-ms`), a fresh `apns-worker run` drains N preloaded jobs; reported per round trip:
/// jobs/s, jobs in flight and ready connections (sampled from its `/metrics` while it drains),
/// its CPU µs per job, and p50/p99 from publish to the request reaching the simulator at a steady
/// rate afterwards (the simulator's 200 reaches the worker the added round trip later).
import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import ArgumentParser
import Foundation
import Logging

struct RoundTripBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "round-trip",
        abstract: "The worker's drain at simulated APNs round trips: jobs/s, in flight, connections, CPU µs/job, latency.")

    @Option(help: "AMQP URL of a running broker (scripts/broker.sh start).")
    var url: String = ProcessInfo.processInfo.environment["APNS_TEST_AMQP_URL"] ?? "amqp://guest:guest@127.0.0.1:5682/%2f"

    @Option(help: "Round trips to add, milliseconds, comma-separated.")
    var latencies: String = "0,20,50,100,200"

    @Option(help: "Jobs to preload and drain at each round trip.")
    var jobs: Int = 50_000

    @Option(help: "Jobs per second in each latency phase (0: none).")
    var rate: Int = 1_000

    @Option(help: "Seconds of each latency phase.")
    var latencySeconds: Int = 5

    @Option(help: "Port of the worker's admin server (its /metrics is sampled).")
    var adminPort: Int = 18_720

    @Option(help: "Extra `[amqp]` keys, `;`-separated (e.g. \"prefetch = 500;maxInFlight = 2000\"). Default: the product's.")
    var amqpKeys: String = ""

    @Option(help: "Extra bundle keys, `;`-separated (e.g. \"connections = 2\"). Default: the product's.")
    var bundleKeys: String = ""

    @Option(help: "The apns-worker binary to measure (another build's, for a before figure).")
    var worker: String?

    @Option(help: "Run the simulator as `<this apns-worker> simulator --latency-ms N` on --simulator-port instead of in this process (a release build, so the simulator is not what limits a debug bench).")
    var simulator: String?

    @Option(help: "Port of the --simulator process.")
    var simulatorPort: Int = 18_721

    func run() async throws {
        var logger = Logger(label: "bench")
        logger.logLevel = .warning
        let rtts = latencies.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        print("round trip | jobs/s | in flight (median, max) | ready connections (max) | worker CPU µs/job | p50 / p99 ms publish → at the simulator (+ round trip → 200)")
        for rtt in rtts {
            let row = try await measure(rtt: rtt, logger: logger)
            print(row)
        }
    }

    private func measure(rtt: Int, logger: Logger) async throws -> String {
        if let simulator { return try await measureExternal(rtt: rtt, simulatorBinary: simulator, logger: logger) }
        let bundle = "com.example.rtt.\(UUID().uuidString.prefix(6).lowercased())"
        let phaseJobs = rate * latencySeconds
        let setup = try await BenchWorkerSetup.start(
            directoryPrefix: "apnsw-rtt", bundleIDs: [bundle], recordLimit: jobs + phaseJobs + 10, logger: logger)
        defer { setup.remove() }
        let simulator = setup.simulator
        simulator.setFaults(SimulatorFaults(latency: .milliseconds(rtt)))
        let configPath = setup.directory + "/worker.conf"
        try BenchWorkerSetup.workerConfig(
            url: url, amqpKeys: Self.keys(amqpKeys), adminKeys: ["listen = 127.0.0.1:\(adminPort)"], bundles: [bundle],
            port: simulator.port, bundleKeys: Self.keys(bundleKeys)
        ).write(toFile: configPath, atomically: true, encoding: .utf8)
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [url], connectionName: "round-trip bench"), logger: logger)
        try await connection.declare(TopologyPlan(bundleIDs: [bundle], retryDelays: [.seconds(1)], queueType: .quorum))
        try await BenchJobs.publish(count: jobs, bundles: [bundle], connection: connection)

        let process = try setup.startWorker(configPath: configPath, executable: worker)
        defer { if process.isRunning { process.terminate() } }
        let probe = ProcessProbe(pid: process.processIdentifier)
        // From the first job answered: the worker's start-up (connections, topology) is no drain.
        try await BenchWorkerSetup.waitUntil(limit: .seconds(300)) { simulator.counters().accepted > 0 }
        let start = ContinuousClock.now
        let acceptedAtStart = simulator.counters().accepted
        let cpuAtStart = probe.cpuSeconds()
        var inFlight: [Double] = []
        var ready: [Double] = []
        var sampledAt = ContinuousClock.now
        try await BenchWorkerSetup.waitUntil(limit: .seconds(1800)) {
            if ContinuousClock.now - sampledAt >= .milliseconds(250), let metrics = Self.metrics(port: adminPort) {
                sampledAt = .now
                inFlight.append(metrics.inFlight)
                ready.append(metrics.ready)
            }
            return simulator.counters().accepted >= jobs
        }
        let drain = start.duration(to: .now).timeInterval
        let drained = jobs - acceptedAtStart
        let cpu = probe.cpuSeconds() - cpuAtStart

        var latency: [Double] = []
        if phaseJobs > 0 {
            simulator.clearAccepted()
            latency = try await setup.pacedLatencies(rate: rate, seconds: latencySeconds) { index, id in
                try await BenchJobs.publishOne(id: id, index: index, bundle: bundle, connection: connection)
            }
        }
        process.terminate()
        process.waitUntilExit()
        for name in [TopologyNames.workQueue(bundle), TopologyNames.deadQueue(bundle), TopologyNames.retryQueue(bundle, delay: .seconds(1))] {
            _ = try? await connection.deleteQueue(name)
        }
        await connection.close()
        try await simulator.shutdown()

        let sample = LatencySample(latency)
        let flight = LatencySample(inFlight)
        let f1 = { (value: Double) in String(format: "%.1f", value) }
        return "\(rtt) ms | \(Int(Double(drained) / drain)) | \(Int(flight.percentile(0.5))), \(Int(flight.percentile(1.0))) | "
            + "\(Int(ready.max() ?? 0)) | \(f1(cpu / Double(max(drained, 1)) * 1e6)) | "
            + (phaseJobs > 0 ? "\(f1(sample.percentile(0.5))) / \(f1(sample.percentile(0.99)))" : "-")
    }

    /// The drain against `apns-worker simulator` as a process: progress read from the work
    /// queue's depth and the worker's jobs in flight; no latency phase.
    private func measureExternal(rtt: Int, simulatorBinary: String, logger: Logger) async throws -> String {
        let bundle = "com.example.rtt.\(UUID().uuidString.prefix(6).lowercased())"
        let directory = NSTemporaryDirectory() + "apnsw-rtt-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let simulator = Process()
        simulator.executableURL = URL(fileURLWithPath: simulatorBinary)
        simulator.arguments = [
            "simulator", "--port", "\(simulatorPort)", "--credentials", directory + "/credentials", "--bundle", bundle,
            "--latency-ms", "\(rtt)",
        ]
        var environment = ProcessInfo.processInfo.environment
        environment["APNS_WORKER_LOG_LEVEL"] = "warning"
        simulator.environment = environment
        simulator.standardOutput = FileHandle.nullDevice
        try simulator.run()
        defer { if simulator.isRunning { simulator.terminate() } }
        try await BenchWorkerSetup.waitUntil(limit: .seconds(60)) {
            FileManager.default.fileExists(atPath: directory + "/credentials/ca.pem")
        }
        try await Task.sleep(for: .seconds(1))
        let configPath = directory + "/worker.conf"
        try BenchWorkerSetup.workerConfig(
            url: url, amqpKeys: Self.keys(amqpKeys), adminKeys: ["listen = 127.0.0.1:\(adminPort)"], bundles: [bundle],
            port: simulatorPort, bundleKeys: Self.keys(bundleKeys)
        ).write(toFile: configPath, atomically: true, encoding: .utf8)
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [url], connectionName: "round-trip bench"), logger: logger)
        try await connection.declare(TopologyPlan(bundleIDs: [bundle], retryDelays: [.seconds(1)], queueType: .quorum))
        let queue = TopologyNames.workQueue(bundle)
        try await BenchJobs.publish(count: jobs, bundles: [bundle], connection: connection)
        let process = Process()
        process.executableURL =
            worker.map(URL.init(fileURLWithPath:))
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-worker")
        process.arguments = ["run", "--config", configPath]
        process.environment = environment
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        let probe = ProcessProbe(pid: process.processIdentifier)
        try await BenchWorkerSetup.waitUntil(limit: .seconds(300)) { (try? await connection.inspectQueue(queue).messageCount) ?? UInt32(jobs) < UInt32(jobs) }
        let start = ContinuousClock.now
        let left = Int(try await connection.inspectQueue(queue).messageCount)
        let cpuAtStart = probe.cpuSeconds()
        var inFlight: [Double] = []
        var ready: [Double] = []
        var sampledAt = ContinuousClock.now
        try await BenchWorkerSetup.waitUntil(limit: .seconds(1800)) {
            let empty = try await connection.inspectQueue(queue).messageCount == 0
            guard empty || ContinuousClock.now - sampledAt >= .milliseconds(250) else { return false }
            sampledAt = .now
            guard let metrics = Self.metrics(port: adminPort) else { return false }
            inFlight.append(metrics.inFlight)
            ready.append(metrics.ready)
            return empty && metrics.inFlight == 0
        }
        let drain = start.duration(to: .now).timeInterval
        let cpu = probe.cpuSeconds() - cpuAtStart
        process.terminate()
        process.waitUntilExit()
        for name in [queue, TopologyNames.deadQueue(bundle), TopologyNames.retryQueue(bundle, delay: .seconds(1))] {
            _ = try? await connection.deleteQueue(name)
        }
        await connection.close()
        let flight = LatencySample(inFlight)
        return "\(rtt) ms | \(Int(Double(left) / drain)) | \(Int(flight.percentile(0.5))), \(Int(flight.percentile(1.0))) | "
            + "\(Int(ready.max() ?? 0)) | \(String(format: "%.1f", cpu / Double(max(left, 1)) * 1e6)) | -"
    }

    static func keys(_ text: String) -> [String] {
        text.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// Jobs in flight and ready APNs connections, summed over the worker's bundles, from its
    /// `/metrics` (curl; nil when it did not answer).
    static func metrics(port: Int) -> (inFlight: Double, ready: Double)? {
        let curl = Process()
        curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        curl.arguments = ["-s", "-m", "5", "http://127.0.0.1:\(port)/metrics"]
        let out = Pipe()
        curl.standardOutput = out
        guard (try? curl.run()) != nil else { return nil }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        curl.waitUntilExit()
        guard curl.terminationStatus == 0 else { return nil }
        var inFlight = 0.0
        var ready = 0.0
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
            guard let value = line.split(separator: " ").last.flatMap({ Double($0) }) else { continue }
            if line.hasPrefix("apns_worker_jobs_in_flight") { inFlight += value }
            if line.hasPrefix("apns_transport_pool_connections"), line.contains("state=\"ready\"") { ready += value }
        }
        return (inFlight, ready)
    }
}
