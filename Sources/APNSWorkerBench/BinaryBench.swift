/// `apns-worker-bench binary`: the binary provider transport on ONE connection to the
/// in-process simulator's binary gateway on loopback: frames/s on the wire (until the gateway
/// has accepted them all) and settled/s (until every `send` returned, which includes the hold
/// window), with p50/p99 latency from `send` to its `.binaryAccepted`.
import APNSModel
import APNSSimulator
import APNSTransport
import ArgumentParser
import Foundation
import Logging

struct BinaryBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "binary",
        abstract: "Binary provider transport frames/s and latency on one connection to the simulator's binary gateway.")

    @Option(help: "Frames per run.")
    var count = 200_000

    @Option(help: "Sends in flight at once.")
    var concurrency = 50_000

    @Option(help: "Hold window in milliseconds (silence for this long counts as delivery).")
    var holdMs = 200

    @Option(help: "Frames held per connection (the in-flight buffer).")
    var buffer = 100_000

    func validate() throws {
        guard count > 0, concurrency > 0, holdMs > 0, buffer > 0 else {
            throw ValidationError("count, concurrency, hold-ms and buffer must be positive")
        }
    }

    func run() async throws {
        var logger = Logger(label: "apns-worker-bench.binary")
        logger.logLevel = .warning
        let directory = NSTemporaryDirectory() + "apnsw-binary-bench-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bundle = "com.example.bench"
        let credentials = try SimulatorCredentials.generate(into: directory, teamID: "TEAM123456", keyID: "KEY1234567")
        var simulatorConfiguration = SimulatorConfiguration(
            tls: credentials.tlsConfiguration(), bundleIDs: [bundle], tokenKeys: [credentials.tokenKey], recordLimit: 0)
        simulatorConfiguration.binaryPort = 0
        let simulator = try await APNSSimulator.start(simulatorConfiguration, logger: logger)
        do {
            try await measure(simulator: simulator, credentials: credentials, bundle: bundle, logger: logger)
        } catch {
            try? await simulator.shutdown()
            throw error
        }
        try await simulator.shutdown()
    }

    private func measure(simulator: APNSSimulator, credentials: GeneratedCredentials, bundle: String, logger: Logger) async throws {
        guard let port = simulator.binaryPort else { throw ValidationError("the simulator did not open its binary gateway") }
        let payload = Array(
            #"{"aps":{"alert":{"title":"Bench","body":"A notification of typical size for the benchmark."},"sound":"default"}}"#.utf8)
        #if DEBUG
        let build = "DEBUG build (not representative; use -c release)"
        #else
        let build = "release build"
        #endif
        print(
            "binary: \(count) frames, \(concurrency) in flight, 1 connection, hold window \(holdMs) ms, buffer \(buffer), "
                + "gateway on 127.0.0.1:\(port), \(build)")

        var configuration = BinaryTransportConfiguration(
            environment: .production, certFile: credentials.clientCertificatePath, keyFile: credentials.clientKeyPath,
            host: "127.0.0.1", port: port)
        configuration.trustRoots = .caFile(credentials.caCertificatePath)
        configuration.connections = 1
        configuration.holdWindow = .milliseconds(holdMs)
        configuration.bufferCapacity = buffer
        configuration.maxQueueWait = .seconds(120)
        let transport = try BinaryTransport(configuration: configuration, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await transport.run() }
            _ = await load(transport, count: min(2000, count), bundle: bundle, payload: payload, simulator: simulator)
            let (run, wireSeconds) = await load(transport, count: count, bundle: bundle, payload: payload, simulator: simulator)
            print(line(run, wireSeconds: wireSeconds, count: count))
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    /// The run's figures: the wire rate (frames the gateway accepted per second) apart from the
    /// rate of settled sends, which the hold window delays.
    private func line(_ run: LoadRun, wireSeconds: Double, count: Int) -> String {
        String(
            format: "BinaryTransport, 1 connection: %.0f frames/s on the wire (%.2f s), %.0f settled/s (%.2f s), "
                + "send→accepted p50 %.2f ms, p99 %.2f ms, %d not accepted",
            Double(count) / wireSeconds, wireSeconds, Double(count) / run.seconds, run.seconds,
            run.latencies.percentile(0.50), run.latencies.percentile(0.99), run.notAccepted)
    }

    /// Sends `count` frames with at most `concurrency` in flight, watching the gateway's count
    /// of accepted frames to time the wire rate apart from the hold window.
    private func load(
        _ transport: BinaryTransport, count: Int, bundle: String, payload: [UInt8], simulator: APNSSimulator
    ) async -> (run: LoadRun, wireSeconds: Double) {
        let acceptedBefore = simulator.counters().binaryAccepted
        let started = ContinuousClock.now
        let wire = Task {
            while simulator.counters().binaryAccepted - acceptedBefore < count && !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(1))
            }
            return started.duration(to: .now).timeInterval
        }
        let run = await runClosedLoop(count: count, concurrency: concurrency, bundle: bundle, payload: payload) {
            await transport.send($0) == .binaryAccepted
        }
        if run.notAccepted > 0 { wire.cancel() }
        return (run, await wire.value)
    }
}
