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
    static func start(directoryPrefix: String, bundleIDs: [String], recordLimit: Int, logger: Logger) async throws -> BenchWorkerSetup {
        let directory = NSTemporaryDirectory() + "\(directoryPrefix)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let credentials = try SimulatorCredentials.generate(into: directory + "/credentials", teamID: "TEAM123456", keyID: "KEY1234567")
        let simulator = try await APNSSimulator.start(
            SimulatorConfiguration(
                tls: credentials.tlsConfiguration(), bundleIDs: bundleIDs, tokenKeys: [credentials.tokenKey], recordLimit: recordLimit),
            logger: logger)
        return BenchWorkerSetup(directory: directory, credentials: credentials, simulator: simulator)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// `apns-worker run --config configPath` from the directory of this binary, logging warnings only.
    func startWorker(configPath: String) throws -> Process {
        let binDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let process = Process()
        process.executableURL = binDirectory.appendingPathComponent("apns-worker")
        process.arguments = ["run", "--config", configPath]
        var environment = ProcessInfo.processInfo.environment
        environment["APNS_WORKER_LOG_LEVEL"] = "warning"
        process.environment = environment
        try process.run()
        return process
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
