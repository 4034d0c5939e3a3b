/// `apns-worker-bench binary`: the binary provider transport on ONE connection to the
/// in-process simulator's binary gateway on loopback: frames/s on the wire (until the gateway
/// has accepted them all) and settled/s (until every `send` returned, which includes the hold
/// window), with p50/p99 latency from `send` to its `.binaryAccepted`.
import APNSCore
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
            let figures = await load(transport, count: count, bundle: bundle, payload: payload, simulator: simulator)
            print(figures.lines())
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    struct Figures {
        var count: Int
        var wireSeconds: Double
        var settledSeconds: Double
        var latenciesMs: [Double]
        var notAccepted: Int

        func lines() -> String {
            let sorted = latenciesMs.sorted()
            func percentile(_ p: Double) -> Double {
                sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
            }
            return String(
                format: "BinaryTransport, 1 connection: %.0f frames/s on the wire (%.2f s), %.0f settled/s (%.2f s), "
                    + "send→accepted p50 %.2f ms, p99 %.2f ms, %d not accepted",
                Double(count) / wireSeconds, wireSeconds, Double(count) / settledSeconds, settledSeconds,
                percentile(0.50), percentile(0.99), notAccepted)
        }
    }

    /// Sends `count` frames with at most `concurrency` in flight, watching the gateway's count
    /// of accepted frames to time the wire rate apart from the hold window.
    private func load(
        _ transport: BinaryTransport, count: Int, bundle: String, payload: [UInt8], simulator: APNSSimulator
    ) async -> Figures {
        let acceptedBefore = simulator.counters().binaryAccepted
        let started = ContinuousClock.now
        let wire = Task {
            while simulator.counters().binaryAccepted - acceptedBefore < count && !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(1))
            }
            return started.duration(to: .now).milliseconds / 1000
        }
        var latencies: [Double] = []
        latencies.reserveCapacity(count)
        var notAccepted = 0
        await withTaskGroup(of: (Double, Bool).self) { group in
            var launched = 0
            while launched < count {
                if launched >= concurrency, let finished = await group.next() {
                    latencies.append(finished.0)
                    if !finished.1 { notAccepted += 1 }
                }
                let notification = PushNotification(
                    id: UUID(), token: DeviceToken(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) }), topic: bundle,
                    pushType: .alert, priority: 10, expiration: nil, collapseID: nil, payload: payload, environment: .production)
                group.addTask {
                    let sent = ContinuousClock.now
                    let result = await transport.send(notification)
                    return (sent.duration(to: .now).milliseconds, result == .binaryAccepted)
                }
                launched += 1
            }
            for await (ms, accepted) in group {
                latencies.append(ms)
                if !accepted { notAccepted += 1 }
            }
        }
        let settled = started.duration(to: .now).milliseconds / 1000
        if notAccepted > 0 { wire.cancel() }
        let wireSeconds = await wire.value
        return Figures(
            count: count, wireSeconds: wireSeconds, settledSeconds: settled, latenciesMs: latencies, notAccepted: notAccepted)
    }
}

extension Duration {
    fileprivate var milliseconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) * 1000 + Double(attoseconds) / 1e15
    }
}
