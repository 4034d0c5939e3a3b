/// `apns-worker-bench registry --monday-morning`: the sync window of contract §6 under a Monday
/// morning. 10,000 groups (times `--scale`) of 3 devices (two in one bundle, one in the other);
/// every group changes 5 times within one minute (times drawn at random, seeded), each change one
/// background group job; the worker runs with `--sync-window` (0 = off: the figures before).
/// Prints group jobs in, pushes out, their ratio, PostgreSQL statements per group job, and the
/// p99 delay from a group job's publish to the push that carries it to each device, for
/// immediate pushes and for trailing ones.
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
import SeededRandom

extension RegistryBench {
    /// One change: when (seconds after the start) and to which group.
    struct Change {
        var at: Double
        var group: Int
        var id: UUID
    }

    func runMondayMorning() async throws {
        var logger = Logger(label: "bench")
        logger.logLevel = .warning
        let groups = max(1, Int((10_000 * scale).rounded()))
        let window = Duration.seconds(syncWindow)
        let tag = UUID().uuidString.prefix(6).lowercased()
        let bundles = ["com.example.monday.universal.\(tag)", "com.example.monday.iphone.\(tag)"]
        let setup = try await BenchWorkerSetup.start(
            directoryPrefix: "apnsw-monday", bundleIDs: bundles, recordLimit: groups * 3 * 5 + 1_000, logger: logger)
        defer { setup.remove() }
        let simulator = setup.simulator
        let configPath = setup.directory + "/worker.conf"
        try Self.workerConfig(
            url: url, postgresURL: postgresURL, bundles: bundles, simulatorPort: simulator.port, countsFlushInterval: "1s", syncWindow: "\(syncWindow)s"
        ).write(toFile: configPath, atomically: true, encoding: .utf8)

        var settings = RegistrySettings(url: try PostgresURL(parsing: postgresURL))
        settings.poolSize = 2
        let store = try RegistryStore(settings: settings, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { task in
            task.addTask { await store.run() }
            defer { task.cancelAll() }
            try await store.migrate()
            let connection = try await Self.connectAndDeclare(url: url, bundles: bundles, logger: logger)

            // Three devices per group: two of the first bundle, one of the second.
            var devices: [(group: Int, bundle: String, token: String)] = []
            for group in 0..<groups {
                for (slot, bundle) in [bundles[0], bundles[0], bundles[1]].enumerated() {
                    devices.append((group, bundle, String(format: "%064x", group * 3 + slot + 1)))
                }
            }
            for bundle in bundles {
                for group in 0..<groups {
                    let tokens = devices[(group * 3)..<(group * 3 + 3)].filter { $0.bundle == bundle }.map(\.token)
                    try await store.importDevices(bundleID: bundle, tokens: tokens, group: "monday-\(tag)-\(group)", at: 1)
                }
            }
            var generator = SeededGenerator(seed: 0x4d6f6e64)
            var changes: [Change] = []
            for group in 0..<groups {
                for _ in 0..<5 { changes.append(Change(at: Double.random(in: 0..<60, using: &generator), group: group, id: UUID())) }
            }
            changes.sort { $0.at < $1.at }

            let worker = try setup.startWorker(configPath: configPath)
            var workerStopped = false
            defer {
                if !workerStopped {
                    worker.terminate()
                    worker.waitUntilExit()
                }
            }
            // The worker is up once it consumes apns.groups.
            try await BenchWorkerSetup.waitUntil(limit: .seconds(300)) { try await connection.inspectQueue(TopologyNames.groups).consumerCount > 0 }
            let statementsBefore = try await Self.transactions(store)

            // Publish every change at its time (in slices of 10 ms, each slice concurrently).
            var publishedAt = [Date](repeating: .distantPast, count: changes.count)
            let start = ContinuousClock.now
            var next = 0
            while next < changes.count {
                let elapsed = start.duration(to: .now).timeInterval
                var slice: [Int] = []
                while next < changes.count, changes[next].at <= elapsed {
                    slice.append(next)
                    next += 1
                }
                try await withThrowingTaskGroup(of: Void.self) { publishes in
                    for index in slice {
                        let change = changes[index]
                        publishedAt[index] = Date()
                        let body = #"{"group":"monday-\#(tag)-\#(change.group)","id":"\#(change.id)","payload":{"aps":{"content-available":1},"n":\#(index)}}"#
                        publishes.addTask {
                            try await connection.publish(
                                AMQPOutboundMessage(exchange: TopologyNames.groups, routingKey: "", body: Array(body.utf8), properties: .persistentJSON))
                        }
                    }
                    try await publishes.waitForAll()
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            // Done when every group job is consumed, no trailing push waits, and the simulator
            // has had nothing new for 3 s (the bench's own statements from here are subtracted).
            var polls = 0
            var lastCount = -1
            var stableSince = ContinuousClock.now
            try await BenchWorkerSetup.waitUntil(limit: .seconds(1800)) {
                try await Task.sleep(for: .milliseconds(500))
                polls += 1
                let count = simulator.accepted().count
                if count != lastCount { (lastCount, stableSince) = (count, .now) }
                let waiting = try await Self.waitingTrailingPushes(store)
                let queued = try await connection.inspectQueue(TopologyNames.groups).messageCount
                return waiting == 0 && queued == 0 && stableSince.duration(to: .now) > .seconds(3)
            }
            let statements = try await Self.transactions(store) - statementsBefore - Int64(polls + 1)
            // Stopped before its queues are deleted, so it does not report their consumers cancelled.
            worker.terminate()
            worker.waitUntilExit()
            workerStopped = true
            try await report(changes: changes, publishedAt: publishedAt, devices: devices, window: window, statements: statements, simulator: simulator)
            try await Self.cleanUp(store: store, connection: connection, bundles: bundles)
        }
        try await simulator.shutdown()
    }

    private func report(
        changes: [Change], publishedAt: [Date], devices: [(group: Int, bundle: String, token: String)], window: Duration,
        statements: Int64, simulator: APNSSimulator
    ) async throws {
        let accepted = simulator.accepted()
        // Per device, its pushes in arrival order; per push id, the change it carries.
        var pushesOf: [String: [(at: Date, change: Int)]] = [:]
        var changeOfID: [String: (change: Int, device: String)] = [:]
        for (index, change) in changes.enumerated() {
            for device in devices[(change.group * 3)..<(change.group * 3 + 3)] {
                let id = UUIDv5.fanOutJobID(groupJobID: change.id, bundleID: device.bundle, token: device.token).uuidString.lowercased()
                changeOfID[id] = (index, device.bundle + ":" + device.token)
            }
        }
        for push in accepted {
            guard let (change, device) = changeOfID[push.apnsID.lowercased()] else { continue }
            pushesOf[device, default: []].append((push.receivedAt, change))
        }
        // A device's push is trailing when its change was published while the window opened by
        // the device's previous push was still open (it was merged), immediate otherwise (the first
        // push, or a change after the window ended). A change reaches a device at once through
        // its own immediate push; otherwise through the first push after its publish that carries
        // it or a change published with or after it (the same 10 ms slice counts as with: those
        // are published concurrently and merged in whichever order the worker takes them).
        let windowSeconds = window.timeInterval
        var immediateOf: [String: [Int: Date]] = [:]
        for (device, pushes) in pushesOf {
            var previous: Date? = nil
            for push in pushes.sorted(by: { $0.at < $1.at }) {
                let merged = previous.map { publishedAt[push.change] < $0.addingTimeInterval(windowSeconds) } ?? false
                if !merged || window == .zero { immediateOf[device, default: [:]][push.change] = push.at }
                previous = push.at
            }
        }
        var immediate: [Double] = [], trailing: [Double] = []
        for (index, change) in changes.enumerated() {
            for device in devices[(change.group * 3)..<(change.group * 3 + 3)] {
                let key = device.bundle + ":" + device.token
                if let at = immediateOf[key]?[index] {
                    immediate.append(at.timeIntervalSince(publishedAt[index]) * 1000)
                } else if let carrier = (pushesOf[key] ?? []).sorted(by: { $0.at < $1.at }).first(where: {
                    $0.at >= publishedAt[index] && publishedAt[$0.change] >= publishedAt[index].addingTimeInterval(-0.02)
                }) {
                    trailing.append(carrier.at.timeIntervalSince(publishedAt[index]) * 1000)
                }
            }
        }
        let out = accepted.filter { changeOfID[$0.apnsID.lowercased()] != nil }.count
        let lost = changes.count * 3 - immediate.count - trailing.count
        print("Monday morning: \(changes.count / 5) groups of 3 devices, 5 changes per group within 60 s, syncWindow = \(syncWindow) s")
        print("group jobs in:   \(changes.count) (\(changes.count * 3) device notifications)")
        print("pushes out:      \(out) = \(String(format: "%.2f", Double(out) / Double(changes.count))) per group job, \(String(format: "%.2f", Double(out) / Double(devices.count))) per device")
        print("statements:      \(statements) PostgreSQL transactions = \(String(format: "%.2f", Double(statements) / Double(changes.count))) per group job (pg_stat_database.xact_commit, the bench's own subtracted)")
        print("delay group job → push carrying it: immediate p50 \(Self.ms(LatencySample(immediate).percentile(0.5))), p99 \(Self.ms(LatencySample(immediate).percentile(0.99))) (\(immediate.count)); trailing p50 \(Self.ms(LatencySample(trailing).percentile(0.5))), p99 \(Self.ms(LatencySample(trailing).percentile(0.99))) (\(trailing.count))")
        print("device notifications no push carried: \(lost)")
    }

    /// Committed transactions of the registry's database so far (every autocommit statement is one).
    static func transactions(_ store: RegistryStore) async throws -> Int64 {
        // The statistics are flushed by each backend about once a second: wait that long first.
        try await Task.sleep(for: .seconds(2))
        let rows = try await store.client.query("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        for try await count in rows.decode(Int64.self) { return count }
        return 0
    }

    static func waitingTrailingPushes(_ store: RegistryStore) async throws -> Int64 {
        let rows = try await store.client.query("SELECT count(*) FROM apns_devices WHERE trailing_body IS NOT NULL")
        for try await count in rows.decode(Int64.self) { return count }
        return 0
    }
}
