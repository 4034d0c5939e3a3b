/// `apns-worker-bench worker`: the whole system on one machine. Preloads N jobs, drains them
/// through a real `apns-worker run` process into the in-process simulator, and reports jobs/s,
/// the worker's CPU seconds and peak RSS; then publishes at a steady rate to measure latency from
/// publish to Apple's 200; then drains the same N jobs with a no-op consumer on this project's
/// AMQP client, the broker's ceiling in the same run.
import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import ArgumentParser
import Foundation
import Logging

struct WorkerBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "End-to-end: jobs/s, latency percentiles, CPU and peak RSS of the worker, beside a no-op consumer.")

    @Option(help: "AMQP URL of a running broker (scripts/broker.sh start).")
    var url: String = ProcessInfo.processInfo.environment["APNS_TEST_AMQP_URL"] ?? "amqp://guest:guest@127.0.0.1:5682/%2f"

    @Option(help: "Jobs to preload and drain.")
    var jobs: Int = 50_000

    @Option(help: "Consumer prefetch (the worker's in-flight bound).")
    var prefetch: Int = 500

    @Option(help: "HTTP/2 connections per environment.")
    var connections: Int = 2

    @Option(help: "Jobs per second in the latency phase.")
    var rate: Int = 1_000

    @Option(help: "Seconds of the latency phase (0: none, so the worker's CPU is the drain's alone).")
    var latencySeconds: Int = 10

    @Option(help: "The bundle's delivery events (contract §8): none, ends or all; published to apns.events, which no queue is bound to here.")
    var events: String = DeliveryEventLevel.none.rawValue

    func validate() throws {
        guard DeliveryEventLevel(rawValue: events) != nil else { throw ValidationError("--events is none, ends or all") }
    }

    func run() async throws {
        var logger = Logger(label: "bench")
        logger.logLevel = .warning
        let bundle = "com.example.bench.\(UUID().uuidString.prefix(6).lowercased())"
        let setup = try await BenchWorkerSetup.start(
            directoryPrefix: "apnsw-bench", bundleIDs: [bundle], recordLimit: jobs + rate * latencySeconds + 10, logger: logger)
        defer { setup.remove() }
        let (directory, simulator) = (setup.directory, setup.simulator)
        let configPath = directory + "/worker.conf"
        try BenchWorkerSetup.workerConfig(
            url: url, amqpKeys: ["prefetch = \(prefetch)"], bundles: [bundle], port: simulator.port,
            bundleKeys: ["connections = \(connections)", "events = \(events)"]
        ).write(toFile: configPath, atomically: true, encoding: .utf8)

        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [url], connectionName: "bench"), logger: logger)
        try await connection.declare(TopologyPlan(bundleIDs: [bundle], retryDelays: [.seconds(1)], queueType: .quorum))
        let queue = TopologyNames.workQueue(bundle)

        // Phase 1: preload, then drain through the worker.
        print("preloading \(jobs) jobs into \(queue) …")
        try await BenchJobs.publish(count: jobs, bundles: [bundle], connection: connection)
        let worker = try setup.startWorker(configPath: configPath)
        let drainStart = ContinuousClock.now
        try await BenchWorkerSetup.waitUntil(limit: .seconds(900)) { simulator.counters().accepted >= jobs }
        let drain = drainStart.duration(to: .now)

        // Phase 2: steady rate, latency from publish to the simulator's acceptance.
        simulator.clearAccepted()
        var latencies = try await setup.pacedLatencies(rate: rate, seconds: latencySeconds) { index, id in
            try await BenchJobs.publishOne(id: id, index: index, bundle: bundle, connection: connection)
        }
        latencies.sort()

        worker.terminate()
        worker.waitUntilExit()
        var usage = rusage()
        getrusage(RUSAGE_CHILDREN.rawValue, &usage)
        let cpu = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6

        // Phase 3: the broker's ceiling: the same drain with a consumer that only acks.
        try await BenchJobs.publish(count: jobs, bundles: [bundle], connection: connection)
        let consumer = try await connection.consume(queue: queue, prefetch: UInt16(clamping: prefetch))
        let noopStart = ContinuousClock.now
        var consumed = 0
        for try await delivery in consumer {
            await connection.ack(delivery)
            consumed += 1
            if consumed == jobs { break }
        }
        let noop = noopStart.duration(to: .now)
        await consumer.cancel()
        for name in [queue, TopologyNames.deadQueue(bundle), TopologyNames.retryQueue(bundle, delay: .seconds(1))] {
            _ = try? await connection.deleteQueue(name)
        }
        await connection.close()
        try await simulator.shutdown()

        let drainRate = Double(jobs) / drain.timeInterval
        let noopRate = Double(jobs) / noop.timeInterval
        print("""
            worker drain:      \(jobs) jobs in \(String(format: "%.2f", drain.timeInterval)) s = \(Int(drainRate)) jobs/s (prefetch \(prefetch), \(connections) connections)
            worker process:    \(String(format: "%.2f", cpu)) CPU s = \(String(format: "%.1f", cpu / Double(jobs + latencies.count) * 1e6)) µs a job (events \(events)), peak RSS \(usage.ru_maxrss / 1024) MiB
            latency at \(rate)/s: p50 \(percentile(latencies, 0.50)) ms, p99 \(percentile(latencies, 0.99)) ms, max \(percentile(latencies, 1.0)) ms (\(latencies.count) jobs, publish → APNs 200)
            no-op consumer:    \(jobs) jobs in \(String(format: "%.2f", noop.timeInterval)) s = \(Int(noopRate)) msgs/s (broker ceiling)
            ratio worker/no-op: \(String(format: "%.2f", drainRate / noopRate))
            """)
    }

    private func percentile(_ sorted: [Double], _ p: Double) -> String {
        guard !sorted.isEmpty else { return "-" }
        return String(format: "%.1f", LatencySample(sorted).percentile(p))
    }
}
