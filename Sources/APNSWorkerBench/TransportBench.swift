/// `apns-worker-bench transport`: the HTTP/2 transport against the in-process simulator on
/// loopback (notifications/s, p50/p99 latency, for each connection count), then `h2load` against
/// the same simulator with equivalent requests, as the server-side ceiling on this machine.
import APNSModel
import APNSSimulator
import APNSTransport
import ArgumentParser
import Foundation
import Logging

struct TransportBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transport",
        abstract: "HTTP/2 transport throughput and latency against the simulator, beside h2load as the ceiling.")

    @Option(help: "Notifications per run.")
    var count = 50_000

    @Option(help: "Sends in flight at once (the worker's bound).")
    var concurrency = 1000

    @Option(parsing: .upToNextOption, help: "Connection counts to measure.")
    var connections: [Int] = [1, 4]

    @Option(help: "Concurrent streams per connection for h2load (-m).")
    var h2loadStreams = 100

    @Option(help: "Path of h2load (Debian nghttp2-client); empty skips it.")
    var h2load = "/usr/bin/h2load"

    func validate() throws {
        guard count > 0, concurrency > 0, !connections.isEmpty, connections.allSatisfy({ $0 > 0 }) else {
            throw ValidationError("count, concurrency and connections must be positive")
        }
    }

    func run() async throws {
        var logger = Logger(label: "apns-worker-bench.transport")
        logger.logLevel = .warning
        let directory = NSTemporaryDirectory() + "apnsw-transport-bench-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bundle = "com.example.bench"
        let credentials = try SimulatorCredentials.generate(into: directory, teamID: "TEAM123456", keyID: "KEY1234567")
        let simulator = try await APNSSimulator.start(
            SimulatorConfiguration(
                tls: credentials.tlsConfiguration(), bundleIDs: [bundle], tokenKeys: [credentials.tokenKey], recordLimit: 0),
            logger: logger)
        do {
            try await measure(simulator: simulator, credentials: credentials, bundle: bundle, directory: directory, logger: logger)
        } catch {
            try? await simulator.shutdown()
            throw error
        }
        try await simulator.shutdown()
    }

    private func measure(
        simulator: APNSSimulator, credentials: GeneratedCredentials, bundle: String, directory: String, logger: Logger
    ) async throws {
        let payload = Array(
            #"{"aps":{"alert":{"title":"Bench","body":"A notification of typical size for the benchmark."},"sound":"default"}}"#.utf8)
        let tokens = ProviderTokenSource(teamID: credentials.teamID, keyID: credentials.keyID, key: credentials.tokenPrivateKey)
        #if DEBUG
        let build = "DEBUG build (not representative; use -c release)"
        #else
        let build = "release build"
        #endif
        print("transport: \(count) notifications, \(concurrency) in flight, simulator on 127.0.0.1:\(simulator.port), \(build)")

        for connectionCount in connections {
            var configuration = HTTP2TransportConfiguration(
                environment: .production, authentication: .token(tokens), host: "127.0.0.1", port: simulator.port)
            configuration.trustRoots = .caFile(credentials.caCertificatePath)
            configuration.connections = connectionCount
            configuration.requestTimeout = .seconds(60)
            let transport = try HTTP2Transport(configuration: configuration, logger: logger)
            let connectionsBefore = simulator.counters().connections
            let figures = try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await transport.run() }
                // Warm-up: every connection up and past its first token-authenticated answer.
                _ = await load(transport, count: min(2000, count), bundle: bundle, payload: payload)
                let figures = await load(transport, count: count, bundle: bundle, payload: payload)
                group.cancelAll()
                try await group.waitForAll()
                return figures
            }
            let opened = simulator.counters().connections - connectionsBefore
            print(line(figures, label: "HTTP2Transport, \(connectionCount) connection(s)", count: count) + ", \(opened) connection(s) opened")
        }

        guard !h2load.isEmpty, FileManager.default.isExecutableFile(atPath: h2load) else {
            print("h2load: \(h2load.isEmpty ? "skipped" : "not found at \(h2load), skipped")")
            return
        }
        let payloadFile = directory + "/payload.json"
        try Data(payload).write(to: URL(fileURLWithPath: payloadFile))
        let jwt = try credentials.providerToken()
        for connectionCount in connections {
            let accepted = simulator.counters().accepted
            let output = try runH2load(
                clients: connectionCount, port: simulator.port, payloadFile: payloadFile, jwt: jwt, topic: bundle)
            let answered200 = simulator.counters().accepted - accepted
            print("h2load -n \(count) -c \(connectionCount) -m \(h2loadStreams) (server-side ceiling), \(answered200) answered 200:")
            let wanted = ["finished in", "requests:", "status codes:", "time for request:"]
            for line in output.split(separator: "\n") where wanted.contains(where: { line.hasPrefix($0) }) {
                print("  " + line)
            }
        }
    }

    /// One run's line for docs/benchmarks.md: rate, latency percentiles, failures.
    private func line(_ run: LoadRun, label: String, count: Int) -> String {
        String(
            format: "%@: %.0f notifications/s, p50 %.2f ms, p99 %.2f ms, %d not 200 (%.2f s)",
            label, Double(count) / run.seconds, run.latencies.percentile(0.50), run.latencies.percentile(0.99),
            run.notAccepted, run.seconds)
    }

    /// Sends `count` notifications with at most `concurrency` in flight; each one's latency is
    /// from `send` to its result (including any wait for a free stream).
    private func load(_ transport: HTTP2Transport, count: Int, bundle: String, payload: [UInt8]) async -> LoadRun {
        await runClosedLoop(count: count, concurrency: concurrency, bundle: bundle, payload: payload) { notification in
            if case .http(let answer) = await transport.send(notification), answer.status == 200 { return true }
            return false
        }
    }

    private func runH2load(clients: Int, port: Int, payloadFile: String, jwt: String, topic: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: h2load)
        process.arguments = [
            "-n", String(count), "-c", String(clients), "-m", String(h2loadStreams), "-d", payloadFile,
            "-H", "apns-topic: \(topic)", "-H", "apns-push-type: alert", "-H", "apns-priority: 10",
            "-H", "authorization: bearer \(jwt)",
            "https://localhost:\(port)/3/device/" + String(repeating: "ab", count: 32),
        ]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}

