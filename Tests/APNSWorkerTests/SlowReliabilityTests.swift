import AMQPClient
import APNSModel
import APNSSimulator
import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The long reliability tests (docs/decisions.md), run by `scripts/test --slow` (CI passes it): a
/// 3-node cluster losing the node that leads the work queue, and a kill -9 soak.
enum SlowTests {
    static var enabled: Bool { ProcessInfo.processInfo.environment["APNS_TEST_SLOW"] == "1" }
}

/// A 3-node RabbitMQ cluster of the test's own (scripts/cluster.sh), always stopped.
final class TestCluster: Sendable {
    let directory: String
    let urls: [String]
    let nodes: [String]
    let managementURLs: [String]
    let ports: [Int]

    private init(directory: String, exports: [String: String]) throws {
        func list(_ key: String) throws -> [String] {
            guard let value = exports[key] else { throw TestSupportError("cluster.sh printed no \(key)") }
            return value.split(separator: " ").map(String.init)
        }
        self.directory = directory
        self.urls = try list("APNS_TEST_CLUSTER_URLS")
        self.nodes = try list("APNS_TEST_CLUSTER_NODES")
        self.managementURLs = try list("APNS_TEST_CLUSTER_MGMT_URLS")
        self.ports = try list("APNS_TEST_CLUSTER_PORTS").compactMap { Int($0) }
    }

    static func withCluster<T>(_ body: (TestCluster) async throws -> T) async throws -> T {
        let directory = NSTemporaryDirectory() + "apnsw-cluster-\(UUID().uuidString.prefix(8))"
        let script = repositoryRoot + "/scripts/cluster.sh"
        let result = try await runProcess(script, ["start", directory])
        do {
            guard result.status == 0 else { throw TestSupportError("cluster.sh start failed: \(result.stderr)") }
            var exports: [String: String] = [:]
            for line in result.stdout.split(separator: "\n") where line.hasPrefix("export ") {
                let pair = line.dropFirst("export ".count).split(separator: "=", maxSplits: 1)
                guard pair.count == 2 else { continue }
                exports[String(pair[0])] = pair[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            }
            let cluster = try TestCluster(directory: directory, exports: exports)
            let value = try await body(cluster)
            await cluster.stop()
            return value
        } catch {
            _ = try? await runProcess(script, ["stop", directory])
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    func stop() async {
        _ = try? await runProcess(repositoryRoot + "/scripts/cluster.sh", ["stop", directory])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Node `index` (0-based) as broker coordinates.
    func coordinates(_ index: Int) -> BrokerCoordinates {
        BrokerCoordinates(
            amqpURL: urls[index], amqpPort: ports[index], managementURL: managementURLs[index], nodeName: nodes[index],
            rabbitmqctl: "/usr/lib/rabbitmq/bin/rabbitmqctl")
    }

    /// kill -9 of node `index`'s Erlang VM.
    func kill9(_ index: Int) throws {
        let pidFile = "\(directory)/node\(index + 1)/rabbitmq.pid"
        let text = try String(contentsOfFile: pidFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let pid = Int32(text) else { throw TestSupportError("no pid in \(pidFile)") }
        guard kill(pid, SIGKILL) == 0 else { throw TestSupportError("kill -9 \(pid) failed") }
    }

    func startNode(_ index: Int) async throws {
        let result = try await runProcess(repositoryRoot + "/scripts/cluster.sh", ["start-node", directory, String(index + 1)])
        guard result.status == 0 else { throw TestSupportError("cluster.sh start-node \(index + 1) failed: \(result.stderr)") }
    }

    /// The index of the node leading `queue` and how many members it has, asked of node `via`.
    func leader(of queue: String, via: Int) async throws -> (leader: Int, members: Int)? {
        let path = "/queues/%2f/" + (queue.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? queue)
        guard let info = try? await coordinates(via).managementJSON(path) as? [String: Any],
            let leader = info["leader"] as? String, let index = nodes.firstIndex(of: leader)
        else { return nil }
        return (index, (info["members"] as? [String])?.count ?? 0)
    }
}

@Suite(.serialized, .enabled(if: SlowTests.enabled, "slow: scripts/test --slow"))
struct ClusterFailoverTests {
    /// Two workers with the three nodes in their failover list drain a quorum queue while kill -9
    /// takes down the node leading it; then, with that node still down, the node leading it next.
    /// Two of three nodes down is a lost quorum: the queue stops until a node comes back (we
    /// restart the first one), and then every job is delivered (docs/decisions.md).
    @Test func workersRideThroughLeaderKills() async throws {
        try await TestCluster.withCluster { cluster in
            var options = WorkerHarness.Options()
            options.prefetch = 50
            options.maxInFlight = 50
            options.workerURLs = cluster.urls
            options.clientURLs = cluster.urls
            let h = try await WorkerHarness.start(broker: cluster.coordinates(0), options: options)
            try await waitUntil("the work queue on all three nodes", timeout: .seconds(60)) {
                try await cluster.leader(of: h.workQueue, via: 0)?.members == 3
            }
            let total = 8000
            let ids = try await h.publishMany(total)
            let workers = [try h.startWorker("a"), try h.startWorker("b")]
            defer { workers.forEach { $0.kill9() } }
            var killed: [Int] = []
            var report: [String] = []
            for round in 1...2 {
                h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(20)))
                let before = h.acceptedIDs().distinct.count
                try await waitUntil("deliveries before kill \(round)", timeout: .seconds(180)) {
                    h.acceptedIDs().distinct.count >= before + 500
                }
                // Slow APNs down so that the kill finds jobs in flight and most still queued.
                h.simulator.setFaults(SimulatorFaults(latency: .seconds(2)))
                let alive = (0..<3).first { !killed.contains($0) }!
                var found: Int?
                try await waitUntil("the work queue's leader", timeout: .seconds(60)) {
                    found = try await cluster.leader(of: h.workQueue, via: alive)?.leader
                    return found.map { !killed.contains($0) } ?? false
                }
                let leader = found!
                try cluster.kill9(leader)
                killed.append(leader)
                let atKill = h.acceptedIDs()
                report.append("kill \(round): node \(leader + 1) (leader) at \(atKill.distinct.count) of \(total) delivered, \(atKill.total - atKill.distinct.count) duplicates so far")
                #expect(atKill.distinct.count < total, "the leader went down with jobs left")
                try await Task.sleep(for: .seconds(3))
                h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(20)))
                if round == 2 {
                    // Only one node of three is up: no quorum, no queue. Bring the first one back.
                    try await Task.sleep(for: .seconds(5))
                    try await cluster.startNode(killed[0])
                }
            }
            try await waitUntil("all \(total) delivered", timeout: .seconds(600)) { h.acceptedIDs().distinct.count == total }
            let expected = Set(ids.map { $0.uuidString.lowercased() })
            #expect(h.acceptedIDs().distinct == expected)
            for worker in workers { #expect(worker.isRunning, "the workers reconnected by themselves") }
            let duplicates = h.acceptedIDs().total - total
            for line in report { print("cluster failover: \(line)") }
            print("cluster failover: \(total) jobs, \(expected.subtracting(h.acceptedIDs().distinct).count) lost, \(duplicates) sent twice (prefetch \(options.prefetch), 2 workers, 2 kills)")
            #expect(duplicates <= 2 * workers.count * (options.maxInFlight ?? 0), "at most the in-flight budget per worker per kill")
            try await waitUntil("an empty work queue", timeout: .seconds(60)) { try await h.messageCount(h.workQueue) == 0 }
            #expect(try await h.messageCount(h.deadQueue) == 0)
            try await cluster.startNode(killed[1])
            await h.shutdown()
        }
    }
}

@Suite(.serialized, .enabled(if: SlowTests.enabled && TestBroker.isAvailable, "slow: scripts/test --slow"))
struct KillNineSoakTests {
    /// 20,000 jobs through a pool of three workers; one of them is killed with SIGKILL 20 times,
    /// at random points of the drain, and restarted each time.
    @Test func twentyKillsLoseNothing() async throws {
        var options = WorkerHarness.Options()
        options.prefetch = 50
        options.maxInFlight = 50
        options.recordLimit = 100_000
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(20)))
        let total = 20_000, kills = 20
        let ids = try await h.publishMany(total)
        var pool = [try h.startWorker("w0"), try h.startWorker("w1"), try h.startWorker("w2")]
        defer { pool.forEach { $0.kill9() } }
        var generator = SystemRandomNumberGenerator()
        let killPoints = (0..<kills).map { _ in Int.random(in: 500..<(total - 1000), using: &generator) }.sorted()
        var killedAt: [String] = []
        for (n, point) in killPoints.enumerated() {
            try await waitUntil("\(point) delivered before kill \(n + 1)", timeout: .seconds(600)) {
                h.acceptedIDs().distinct.count >= point
            }
            let victim = Int.random(in: 0..<pool.count, using: &generator)
            pool[victim].signal(SIGKILL)
            _ = await pool[victim].waitForExit(timeout: .seconds(10))
            let now = h.acceptedIDs()
            killedAt.append("\(now.distinct.count) (\(now.total - now.distinct.count) dup.)")
            pool[victim] = try h.startWorker("w\(victim)-\(n + 1)")
        }
        try await waitUntil("all \(total) delivered", timeout: .seconds(900)) { h.acceptedIDs().distinct.count == total }
        let (distinct, sent) = h.acceptedIDs()
        let expected = Set(ids.map { $0.uuidString.lowercased() })
        #expect(distinct == expected, "none lost")
        let duplicates = sent - distinct.count
        print("kill -9 soak: kills when this many jobs were delivered (duplicates so far): \(killedAt.joined(separator: ", "))")
        print("kill -9 soak: \(total) jobs, \(kills) kills, \(expected.subtracting(distinct).count) lost, \(duplicates) sent twice (prefetch \(options.prefetch))")
        #expect(duplicates <= kills * (options.maxInFlight ?? 0), "at most the killed worker's in-flight budget per kill")
        try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }
        #expect(try await h.messageCount(h.deadQueue) == 0)
        for worker in pool { #expect(worker.isRunning) }
        await h.shutdown()
    }
}
