/// One run of `apns-worker-bench scale`: the simulator and a worker configuration for N bundles,
/// their topology on the broker, preloading and paced publishing spread over the bundles, and
/// removing the queues afterwards. Also the job publishing the `worker` benchmark shares.
import AMQPClient
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import APNSWorkerClient
import ArgumentParser
import Crypto
import Foundation
import Logging

struct ScaleRun {
    let setup: BenchWorkerSetup
    let configPath: String
    let bundleIDs: [String]
    let connection: AMQPConnection

    /// A simulator serving `bundles` fresh bundle IDs, a worker configuration naming them all
    /// (with the benchmark's extra keys), and their topology declared.
    /// - Parameter teamPerBundle: each bundle signs with a key of a team of its own (a pool
    ///   each); otherwise every bundle is of one team and shares one key (one pool).
    static func start(bundles: Int, recordLimit: Int, teamPerBundle: Bool = false, bench: ScaleBench, logger: Logger) async throws -> ScaleRun {
        let prefix = "com.example.scale.\(UUID().uuidString.prefix(6).lowercased())"
        let bundleIDs = (0..<bundles).map { "\(prefix).b\($0)" }
        // Apple's IDs are 10 upper-case letters and digits.
        let teams = teamPerBundle ? (0..<bundles).map { (teamID: String(format: "T%09d", $0), keyID: String(format: "K%09d", $0), key: P256.Signing.PrivateKey()) } : []
        let setup = try await BenchWorkerSetup.start(
            directoryPrefix: "apnsw-scale", bundleIDs: bundleIDs, recordLimit: recordLimit,
            tokenKeys: teams.map { SimulatorTokenKey(keyID: $0.keyID, teamID: $0.teamID, publicKey: $0.key.publicKey) }, logger: logger)
        let configPath = setup.directory + "/worker.conf"
        var config = BenchWorkerSetup.workerConfig(
            url: bench.url, amqpKeys: bench.amqpKeys, bundles: teamPerBundle ? [] : bundleIDs, port: setup.simulator.port,
            bundleKeys: bench.bundleKeys)
        for (bundle, team) in zip(bundleIDs, teams) {
            try (team.key.pemRepresentation + "\n").write(
                toFile: "\(setup.directory)/credentials/AuthKey_\(team.keyID).p8", atomically: true, encoding: .utf8)
            config += BenchWorkerSetup.bundleSection(
                bundle, port: setup.simulator.port, extraKeys: bench.bundleKeys, teamID: team.teamID, keyID: team.keyID)
        }
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [bench.url], connectionName: "bench scale"), logger: logger)
        try await connection.declare(TopologyPlan(bundleIDs: bundleIDs, retryDelays: [.seconds(1)], queueType: .quorum))
        return ScaleRun(setup: setup, configPath: configPath, bundleIDs: bundleIDs, connection: connection)
    }

    /// `count` jobs, round-robin over the bundles, 500 confirms in flight.
    func publish(count: Int) async throws {
        try await BenchJobs.publish(count: count, bundles: bundleIDs, connection: connection)
    }

    /// Publishes at `rate` per second for `seconds`, round-robin over the bundles, and returns
    /// each job's milliseconds from publishing to the simulator's 200.
    func latencies(rate: Int, seconds: Int) async throws -> [Double] {
        try await setup.pacedLatencies(rate: rate, seconds: seconds) { index, id in
            try await BenchJobs.publishOne(id: id, index: index, bundle: bundleIDs[index % bundleIDs.count], connection: connection)
        }
    }

    /// Deletes the run's queues, closes the connection and stops the simulator.
    func finish() async throws {
        for bundle in bundleIDs {
            for name in [TopologyNames.workQueue(bundle), TopologyNames.deadQueue(bundle), TopologyNames.retryQueue(bundle, delay: .seconds(1))] {
                _ = try? await connection.deleteQueue(name)
            }
        }
        await connection.close()
        try await setup.simulator.shutdown()
    }
}

/// Jobs as the sync server publishes them, written by the client's encoder (`NotificationJob`): a
/// distinct token per index, an alert payload, the id as the message id, persistent, with
/// publisher confirms.
enum BenchJobs {
    /// `count` jobs, round-robin over `bundles`, never more than 500 unconfirmed.
    static func publish(count: Int, bundles: [String], connection: AMQPConnection) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<count {
                if index >= 500 { try await group.next() }
                group.addTask {
                    try await publishOne(id: UUID(), index: index, bundle: bundles[index % bundles.count], connection: connection)
                }
            }
            try await group.waitForAll()
        }
    }

    static func publishOne(id: UUID, index: Int, bundle: String, connection: AMQPConnection) async throws {
        let job = NotificationJob(bundleID: bundle, token: String(format: "%064x", index), payload: .alert("bench \(index)"), id: id)
        var properties = AMQPProperties.persistentJSON
        // As the body writes it (lower case), so that the two never disagree.
        properties.messageID = id.uuidString.lowercased()
        try await connection.publish(
            AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: bundle, body: job.body(), properties: properties))
    }
}
