/// What the end-to-end benchmarks (`worker`, `registry`) share: a scratch directory with the
/// simulator's credentials, the in-process simulator for their bundles, the real `apns-worker`
/// binary beside this one as a child process, and polling until a figure is reached.
import APNSSimulator
import ArgumentParser
import Foundation
import Logging

struct BenchWorkerSetup {
    let directory: String
    let credentials: GeneratedCredentials
    let simulator: APNSSimulator

    /// Creates `directory` (removed by `remove()`), credentials in it, and a simulator serving
    /// `bundleIDs` that records up to `recordLimit` accepted notifications.
    /// - Parameter tokenKeys: more provider token keys the simulator accepts (teams of their own).
    static func start(
        directoryPrefix: String, bundleIDs: [String], recordLimit: Int, tokenKeys: [SimulatorTokenKey] = [], logger: Logger
    ) async throws -> BenchWorkerSetup {
        let directory = NSTemporaryDirectory() + "\(directoryPrefix)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let credentials = try SimulatorCredentials.generate(into: directory + "/credentials", teamID: "TEAM123456", keyID: "KEY1234567")
        let simulator = try await APNSSimulator.start(
            SimulatorConfiguration(
                tls: credentials.tlsConfiguration(), bundleIDs: bundleIDs, tokenKeys: [credentials.tokenKey] + tokenKeys,
                recordLimit: recordLimit),
            logger: logger)
        return BenchWorkerSetup(directory: directory, credentials: credentials, simulator: simulator)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// `apns-worker run --config configPath`, logging warnings only: `executable` (another build,
    /// main's say, for a before figure) or else the `apns-worker` beside this binary.
    func startWorker(configPath: String, executable: String? = nil) throws -> Process {
        let process = Process()
        process.executableURL =
            executable.map(URL.init(fileURLWithPath:))
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-worker")
        process.arguments = ["run", "--config", configPath]
        var environment = ProcessInfo.processInfo.environment
        // Quiet unless the bench is asked for more (`APNS_BENCH_WORKER_LOG_LEVEL=info`: why a
        // figure looks wrong, e.g. connections replaced during a drain).
        environment["APNS_WORKER_LOG_LEVEL"] = environment["APNS_BENCH_WORKER_LOG_LEVEL"] ?? "warning"
        process.environment = environment
        try process.run()
        return process
    }

    /// A bench worker's whole configuration: `[amqp]` on `url` with `amqpKeys`, `[admin]` with
    /// `adminKeys`, retries after 1 s (3 attempts), `sections` (a `[registry]` say) as given, then
    /// a `bundleSection` with `bundleKeys` for each of `bundles` against the simulator on `port`.
    static func workerConfig(
        url: String, amqpKeys: [String] = [], adminKeys: [String] = ["listen = 127.0.0.1:0"], sections: String = "",
        bundles: [String], port: Int, bundleKeys: [String] = []
    ) -> String {
        var config = """
            [amqp]
            url = \(url)
            \(amqpKeys.joined(separator: "\n"))
            [admin]
            \(adminKeys.joined(separator: "\n"))
            [retry]
            delays = 1s
            maxAttempts = 3
            \(sections)

            """
        for bundle in bundles {
            config += bundleSection(bundle, port: port, extraKeys: bundleKeys)
        }
        return config
    }

    /// A token-authenticated `[apns "bundle"]` section against the simulator on `port`, with
    /// `extraKeys` (one `key = value` each), signing with the key `credentials/AuthKey_<keyID>.p8`.
    static func bundleSection(
        _ bundle: String, port: Int, extraKeys: [String], teamID: String = "TEAM123456", keyID: String = "KEY1234567"
    ) -> String {
        """
        [apns "\(bundle)"]
        teamId = \(teamID)
        keyId = \(keyID)
        tokenKeyFile = credentials/AuthKey_\(keyID).p8
        host = 127.0.0.1
        port = \(port)
        caFile = credentials/ca.pem
        \(extraKeys.joined(separator: "\n"))

        """
    }

    /// Publishes `rate` jobs a second for `seconds` through `publish` (given the index, the job
    /// id), then waits for the simulator to accept them all and returns each job's milliseconds
    /// from publishing to the simulator's 200. Call `simulator.clearAccepted()` first.
    func pacedLatencies(rate: Int, seconds: Int, publish: (Int, UUID) async throws -> Void) async throws -> [Double] {
        var published: [String: Date] = [:]
        let interval = Duration.seconds(1) / max(rate, 1)
        let total = rate * seconds
        let paceStart = ContinuousClock.now
        for index in 0..<total {
            let id = UUID()
            published[id.uuidString.lowercased()] = Date()
            try await publish(index, id)
            let due = paceStart.advanced(by: interval * (index + 1))
            if due > .now { try await Task.sleep(until: due, clock: .continuous) }
        }
        let simulator = simulator
        try await Self.waitUntil(limit: .seconds(900)) { simulator.accepted().count >= total }
        return simulator.accepted().compactMap { accepted in
            published[accepted.apnsID.lowercased()].map { accepted.receivedAt.timeIntervalSince($0) * 1000 }
        }
    }

    /// Polls `condition` every 20 ms; a benchmark that has not got there within `limit` failed.
    static func waitUntil(limit: Duration, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now.advanced(by: limit)
        while try await !condition() {
            guard ContinuousClock.now < deadline else { throw ValidationError("the benchmark did not finish within \(limit)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
