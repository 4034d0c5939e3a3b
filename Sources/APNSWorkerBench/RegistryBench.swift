/// `apns-worker-bench registry`: contract §6 through a real `apns-worker run` process, a real
/// broker, a real PostgreSQL and the in-process simulator. Reports registration messages applied
/// per second, then group jobs fanned out per second for groups of 5 and of 1,000 devices over a
/// registry of `--registry-size` devices, with p50/p99 from a group job's publish to its last
/// device's APNs 200. `--monday-morning` runs the sync window's case instead (RegistryBench+Monday.swift).
import AMQPClient
import APNSConfig
import APNSModel
import APNSRegistry
import APNSRegistryMessages
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import ArgumentParser
import Foundation
import Logging
import PostgresNIO

struct RegistryBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "registry", abstract: "Registrations/s and group fan-out (groups of 5 and 1,000) over a large registry.")

    @Option(help: "AMQP URL of a running broker (scripts/broker.sh start).")
    var url: String = ProcessInfo.processInfo.environment["APNS_TEST_AMQP_URL"] ?? "amqp://guest:guest@127.0.0.1:5682/%2f"

    @Option(help: "PostgreSQL URL (scripts/postgres.sh start).")
    var postgresURL: String = ProcessInfo.processInfo.environment["APNS_TEST_POSTGRES_URL"] ?? "postgres://apns:apns@127.0.0.1:5442/apns?sslmode=disable"

    @Option(help: "Registration messages to apply.")
    var registrations: Int = 20_000

    @Option(help: "Devices in the registry during the fan-out phases.")
    var registrySize: Int = 1_000_000

    @Option(help: "Group jobs for groups of 5.")
    var smallGroupJobs: Int = 1_000

    @Option(help: "Group jobs for groups of 1,000.")
    var largeGroupJobs: Int = 20

    @Flag(help: "Instead of the phases above: the Monday-morning case of the sync window (10,000 groups of 3 devices, 5 changes per group within a minute).")
    var mondayMorning = false

    @Option(help: "Monday morning: the share of the 10,000 groups to run (e.g. 0.1 for 1,000).")
    var scale: Double = 1

    @Option(help: "Monday morning: the worker's [registry] syncWindow in seconds (0 = off: the figures before).")
    var syncWindow: Int = 30

    func run() async throws {
        if mondayMorning {
            try await runMondayMorning()
            return
        }
        var logger = Logger(label: "bench")
        logger.logLevel = .warning
        let tag = UUID().uuidString.prefix(6).lowercased()
        let bundles = ["com.example.bench.universal.\(tag)", "com.example.bench.iphone.\(tag)"]
        let setup = try await BenchWorkerSetup.start(
            directoryPrefix: "apnsw-regbench", bundleIDs: bundles,
            recordLimit: smallGroupJobs * 5 + largeGroupJobs * 1_000 + 1_000, logger: logger)
        defer { setup.remove() }
        let (directory, simulator) = (setup.directory, setup.simulator)
        let config = Self.workerConfig(
            url: url, postgresURL: postgresURL, bundles: bundles, simulatorPort: simulator.port, countsFlushInterval: "5s", syncWindow: "0")
        let configPath = directory + "/worker.conf"
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)

        var settings = RegistrySettings(url: try PostgresURL(parsing: postgresURL))
        settings.poolSize = 4
        let store = try RegistryStore(settings: settings, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await store.run() }
            defer { group.cancelAll() }
            try await store.migrate()
            let connection = try await Self.connectAndDeclare(url: url, bundles: bundles, logger: logger)

            // Phase 1: registration messages, preloaded, then applied by the worker.
            print("preloading \(registrations) registration messages …")
            try await publishConcurrently(registrations, connection: connection) { index in
                let body = #"{"op":"register","bundleId":"\#(bundles[index % 2])","token":"\#(String(format: "%064x", index))","group":"reg-\#(index / 5)","at":\#(1_000 + index)}"#
                return AMQPOutboundMessage(exchange: TopologyNames.registry, routingKey: "", body: Array(body.utf8), properties: .persistentJSON)
            }
            let worker = try setup.startWorker(configPath: configPath)
            let applied = { () async throws -> Int64 in
                try await store.deviceCounts().bundles.filter { bundles.contains($0.bundleId) }.reduce(0) { $0 + $1.active }
            }
            // Timed from the first registration applied, so the worker's start-up is not in it.
            try await BenchWorkerSetup.waitUntil(limit: .seconds(1800)) { try await applied() > 0 }
            let registrationStart = ContinuousClock.now
            let appliedAtStart = try await applied()
            try await BenchWorkerSetup.waitUntil(limit: .seconds(1800)) { try await applied() >= Int64(registrations) }
            let registrationTime = registrationStart.duration(to: .now)
            let registrationsTimed = registrations - Int(appliedAtStart)

            // Phase 2: fill the registry to `registrySize` devices: groups of 5, groups of 1,000, filler.
            print("importing \(registrySize) devices …")
            let smallGroups = max(smallGroupJobs, 1), largeGroups = max(largeGroupJobs, 1)
            var imported = registrations
            var next = registrations
            func importGroup(_ name: String, size: Int) async throws {
                for bundle in bundles {
                    let count = bundle == bundles[0] ? (size + 1) / 2 : size / 2
                    let tokens = (next..<(next + count)).map { String(format: "%064x", $0) }
                    next += count
                    try await store.importDevices(bundleID: bundle, tokens: tokens, group: name, at: 1)
                }
                imported += size
            }
            for g in 0..<smallGroups { try await importGroup("small-\(g)", size: 5) }
            for g in 0..<largeGroups { try await importGroup("large-\(g)", size: 1_000) }
            var filler = 0
            while imported < registrySize {
                try await importGroup("filler-\(filler)", size: min(10_000, registrySize - imported))
                filler += 1
            }

            // Phase 3: group jobs. First a burst (every group job published at once: fan-out
            // throughput), then one at a time, each waited for (latency without a queue in front).
            var lines: [String] = []
            for (label, prefix, jobs, size) in [("groups of 5", "small", smallGroups, 5), ("groups of 1000", "large", largeGroups, 1_000)] {
                let burst = try await fanOut(
                    groups: (0..<jobs).map { "\(prefix)-\($0)" }, size: size, oneAtATime: false, connection: connection, store: store, simulator: simulator)
                let single = try await fanOut(
                    groups: (0..<min(jobs, 50)).map { "\(prefix)-\($0)" }, size: size, oneAtATime: true, connection: connection, store: store,
                    simulator: simulator)
                lines.append(
                    "\(label), burst: \(jobs) group jobs (\(jobs * size) device jobs) in \(String(format: "%.2f", burst.elapsed)) s = "
                        + "\(String(format: "%.1f", Double(jobs) / burst.elapsed)) group jobs/s, \(Int(Double(jobs * size) / burst.elapsed)) device jobs/s; "
                        + "publish → last device's 200: p50 \(Self.ms(burst.latencies.percentile(0.5))), p99 \(Self.ms(burst.latencies.percentile(0.99)))")
                lines.append(
                    "\(label), one at a time: \(single.latencies.count) group jobs; publish → last device's 200: "
                        + "p50 \(Self.ms(single.latencies.percentile(0.5))), p99 \(Self.ms(single.latencies.percentile(0.99)))")
            }
            worker.terminate()
            worker.waitUntilExit()
            try await Self.cleanUp(store: store, connection: connection, bundles: bundles)
            try await simulator.shutdown()
            print("registrations:  \(registrationsTimed) messages applied in \(String(format: "%.2f", registrationTime.timeInterval)) s = \(Int(Double(registrationsTimed) / registrationTime.timeInterval)) registrations/s")
            print("registry size:  \(imported) devices")
            for line in lines { print(line) }
        }
    }

    /// Publishes one group job per group (all at once, or each after the last one's devices are
    /// all accepted) and measures from each publish to its last device's acceptance by the simulator.
    private func fanOut(
        groups: [String], size: Int, oneAtATime: Bool, connection: AMQPConnection, store: RegistryStore, simulator: APNSSimulator
    ) async throws -> (elapsed: Double, latencies: LatencySample) {
        simulator.clearAccepted()
        let groupJobIDs = groups.map { _ in UUID() }
        var jobOfDevice: [String: Int] = [:]
        for device in try await allDevices(store, groups: groups) {
            let group = groups.firstIndex(of: device.group)!
            let id = UUIDv5.fanOutJobID(groupJobID: groupJobIDs[group], bundleID: device.bundleID, token: device.token)
            jobOfDevice[id.uuidString.lowercased()] = group
        }
        var publishedAt = [Date](repeating: .distantPast, count: groups.count)
        let start = ContinuousClock.now
        for (index, group) in groups.enumerated() {
            publishedAt[index] = Date()
            let body = #"{"group":"\#(group)","id":"\#(groupJobIDs[index])","payload":{"aps":{"content-available":1}}}"#
            try await connection.publish(
                AMQPOutboundMessage(exchange: TopologyNames.groups, routingKey: "", body: Array(body.utf8), properties: .persistentJSON))
            if oneAtATime { try await BenchWorkerSetup.waitUntil(limit: .seconds(1800)) { simulator.accepted().count >= (index + 1) * size } }
        }
        try await BenchWorkerSetup.waitUntil(limit: .seconds(1800)) { simulator.accepted().count >= groups.count * size }
        let elapsed = start.duration(to: .now).timeInterval
        var last = [Date](repeating: .distantPast, count: groups.count)
        for accepted in simulator.accepted() {
            guard let group = jobOfDevice[accepted.apnsID.lowercased()] else { continue }
            last[group] = max(last[group], accepted.receivedAt)
        }
        return (elapsed, LatencySample(zip(last, publishedAt).map { $0.timeIntervalSince($1) * 1000 }))
    }

    /// A connection to the broker with the bundles' and §6's topology declared, §6's queues empty.
    static func connectAndDeclare(url: String, bundles: [String], logger: Logger) async throws -> AMQPConnection {
        let connection = try await AMQPConnection.connect(configuration: AMQPConfiguration(urlStrings: [url], connectionName: "bench"), logger: logger)
        var plan = TopologyPlan(bundleIDs: bundles, retryDelays: [.seconds(1)], queueType: .quorum)
        plan.addRegistry(queueType: .quorum)
        try await connection.declare(plan)
        for queue in [TopologyNames.registry, TopologyNames.groups] { _ = try await connection.purgeQueue(queue) }
        return connection
    }

    /// Removes the bench's devices and its bundles' queues, and closes the connection.
    static func cleanUp(store: RegistryStore, connection: AMQPConnection, bundles: [String]) async throws {
        try await store.client.query("DELETE FROM apns_devices WHERE bundle_id = ANY(\(bundles)::text[])")
        for bundle in bundles {
            for name in [TopologyNames.workQueue(bundle), TopologyNames.deadQueue(bundle), TopologyNames.retryQueue(bundle, delay: .seconds(1))] {
                _ = try? await connection.deleteQueue(name)
            }
        }
        await connection.close()
    }

    /// The worker's configuration: the broker, the registry, one HTTP/2 bundle per ID on the simulator.
    static func workerConfig(
        url: String, postgresURL: String, bundles: [String], simulatorPort: Int, countsFlushInterval: String, syncWindow: String
    ) -> String {
        BenchWorkerSetup.workerConfig(
            url: url, amqpKeys: ["prefetch = 500"],
            sections: """
                [registry]
                url = \(postgresURL)
                poolSize = 8
                countsFlushInterval = \(countsFlushInterval)
                syncWindow = \(syncWindow)
                """,
            bundles: bundles, port: simulatorPort, bundleKeys: ["connections = 2"])
    }

    static func ms(_ value: Double) -> String { String(format: "%.0f ms", value) }

    private func allDevices(_ store: RegistryStore, groups: [String]) async throws -> [(group: String, bundleID: String, token: String)] {
        var out: [(group: String, bundleID: String, token: String)] = []
        for group in groups {
            for device in try await store.activeDevices(group: group, after: nil, limit: 10_000) {
                out.append((group: group, bundleID: device.bundleID, token: device.token))
            }
        }
        return out
    }

    private func publishConcurrently(_ count: Int, connection: AMQPConnection, _ message: @escaping @Sendable (Int) -> AMQPOutboundMessage) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<count {
                if index >= 500 { try await group.next() }
                group.addTask { try await connection.publish(message(index)) }
            }
            try await group.waitForAll()
        }
    }
}
