import AMQPClient
import APNSFleet
import APNSSimulator
import APNSTopologyNames
import APNSWorker
import Foundation
import Testing
import TestSupport

@testable import APNSRegistry

/// A hostile publisher: against the real broker, PostgreSQL, the APNs simulator and two
/// real `apns-worker run` processes, it publishes thousands of random mutations of valid messages
/// on every queue and exchange the worker reads (`apns.jobs` for both bundles, a retry queue,
/// `apns.registry`, `apns.groups`, `apns.fleet`), interleaved with valid ones, bounded in count
/// and time. Then: every instance alive, every valid job delivered exactly once (the simulator
/// counts apns-ids), every message the parsers refuse in its `.dead` queue with its body
/// unchanged, `/ready` 200 throughout, and the fleet view still right. Seeded: set
/// `APNS_TEST_HOSTILE_SEED` to replay a run (the seed is printed).
extension RegistryBrokerSuites {
@Suite(.serialized, .enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct HostilePublisherTests {
    typealias Planned = HostilePlan.Planned

    static let environment = ProcessInfo.processInfo.environment
    static let total = Int(environment["APNS_TEST_HOSTILE_COUNT"] ?? "") ?? 3000
    static let publishBudget = Duration.seconds(120)

    @Test func thousandsOfMutationsLeaveTheFleetWhole() async throws {
        let seed = UInt64(Self.environment["APNS_TEST_HOSTILE_SEED"] ?? "") ?? UInt64.random(in: 1..<UInt64.max)
        print("hostile publisher: seed \(seed) (APNS_TEST_HOSTILE_SEED to replay), up to \(Self.total) messages")
        let harness = try await RegistryHarness.start()
        try await harness.withWorkers(["a", "b"]) { workers in try await run(harness, workers, seed: seed) }
    }

    func run(_ harness: RegistryHarness, _ workers: [ChildProcess], seed: UInt64) async throws {
        var ports: [Int] = []
        for worker in workers {
            try await waitUntil("the admin server of \(worker.logPath)", timeout: .seconds(120)) { RegistryHarness.adminPort(worker) != nil }
            ports.append(try #require(RegistryHarness.adminPort(worker)))
        }
        // The group the valid group jobs fan out to, registered before the storm.
        let group = "hostile-\(seed)"
        let members = [(harness.bundles[0], RegistryHarness.token(900_001)), (harness.bundles[0], RegistryHarness.token(900_002)), (harness.bundles[1], RegistryHarness.token(900_003))]
        for (bundle, token) in members { try await harness.register(bundle, token, group: group, at: 1) }
        try await TestPostgres.withStore(harness.registry) { store in
            try await waitUntil("the group registered", timeout: .seconds(120)) {
                try await store.activeDevices(group: group, after: nil, limit: 10).count == members.count
            }
        }

        let user = try AMQPURL(string: try TestBroker.require().amqpURL).user
        var plan = HostilePlan(seed: seed, bundles: harness.bundles, group: group, members: members, user: user)
        let planned = plan.make(count: Self.total)
        let readiness = ReadyWatch(ports: ports)
        let watcher = Task { await readiness.watch() }
        defer { watcher.cancel() }

        // Publish, confirmed, interleaved, bounded in time.
        let started = ContinuousClock.now
        var sent: [Planned] = []
        for item in planned {
            guard ContinuousClock.now - started < Self.publishBudget else { break }
            try await harness.connection.publish(item.message)
            sent.append(item)
        }
        let byKind = Dictionary(grouping: sent, by: \.kind).mapValues(\.count)
        print("hostile publisher: published \(sent.count) in \(ContinuousClock.now - started): \(byKind.sorted { $0.key < $1.key })")

        // Every valid job delivered; every refused message dead.
        let validIDs = sent.flatMap { item -> [String] in if case .delivered(let ids) = item.expect { ids } else { [] } }
        var deadExpected: [String: [[UInt8]]] = [:]
        for item in sent { if case .dead(let queue) = item.expect { deadExpected[queue, default: []].append(item.message.body) } }
        // Envelope cases: their dead letters carry the x-apns-* headers of contract §4's table.
        var withDeadLetterHeaders = Dictionary(grouping: sent.filter(\.deadLetterHeaders).map(\.message.body), by: { $0 }).mapValues(\.count)
        let apnsIDs = { Dictionary(grouping: harness.simulator.accepted().map { $0.apnsID.lowercased() }, by: { $0 }).mapValues(\.count) }
        do {
            try await waitUntil("every valid job delivered and every refused message dead", timeout: .seconds(600), every: .seconds(2)) {
                // A dead worker will not deliver anything more: say so now, not in ten minutes.
                for worker in workers where !worker.isRunning { throw TestSupportError("\(worker.logPath) died") }
                let accepted = apnsIDs()
                guard validIDs.allSatisfy({ accepted[$0] != nil }) else { return false }
                for (queue, bodies) in deadExpected where try await harness.messageCount(queue) < bodies.count { return false }
                return true
            }
        } catch {
            let accepted = apnsIDs()
            print("hostile publisher: valid jobs not delivered: \(validIDs.filter { accepted[$0] == nil }.count) of \(validIDs.count)")
            for (queue, bodies) in deadExpected.sorted(by: { $0.key < $1.key }) {
                print("hostile publisher: \(queue): \(try await harness.messageCount(queue)) dead, \(bodies.count) expected at least")
            }
            throw error
        }
        let accepted = apnsIDs()
        let duplicated = validIDs.filter { accepted[$0] != 1 }
        #expect(duplicated.isEmpty, "valid jobs delivered more than once: \(duplicated.prefix(5))")

        // The dead queues hold exactly the refused bodies, unchanged (and nothing else of ours).
        var deadFound = 0
        for (queue, bodies) in deadExpected {
            var expected = Dictionary(grouping: bodies, by: { $0 }).mapValues(\.count)
            while let dead = try await harness.connection.get(queue: queue) {
                await harness.connection.ack(dead)
                if let left = expected[dead.message.body], left > 0 { expected[dead.message.body] = left - 1; deadFound += 1 }
                if let left = withDeadLetterHeaders[dead.message.body], left > 0 {
                    withDeadLetterHeaders[dead.message.body] = left - 1
                    let headers = dead.message.properties.headers ?? [:]
                    #expect(headers[JobHeaders.reason]?.stringValue == "MalformedJob", "\(queue): an envelope case dead without x-apns-reason")
                    #expect(headers[JobHeaders.status]?.intValue == 0 && headers[JobHeaders.failedAt] != nil && headers[JobHeaders.error] != nil)
                    #expect(dead.message.properties.userID == nil && dead.message.properties.expiration == nil)
                }
            }
            let missing = expected.values.reduce(0, +)
            #expect(missing == 0, "\(missing) refused messages of \(queue) not in its dead queue with their body unchanged")
        }
        #expect(withDeadLetterHeaders.values.reduce(0, +) == 0, "envelope cases not found dead")

        // The valid registrations of the storm were applied.
        let registered = sent.filter { if case .applied = $0.expect { true } else { false } }.count
        let stormGroup = plan.stormGroup
        try await TestPostgres.withStore(harness.registry) { store in
            try await waitUntil("the storm's valid registrations applied", timeout: .seconds(120)) {
                try await store.activeDevices(group: stormGroup, after: nil, limit: 10_000).count == registered
            }
        }

        // Every instance alive, /ready 200 throughout, and the fleet view right: the two real
        // instances, their delivered counts adding up to what the simulator accepted.
        for worker in workers { #expect(worker.isRunning, "\(worker.logPath) died") }
        watcher.cancel()
        let notReady = await readiness.failures
        #expect(notReady.isEmpty, "/ready was not 200: \(notReady.prefix(5))")
        for bundle in harness.bundles {
            let deliveredHere = harness.accepted(bundle).values.reduce(0, +)
            try await waitUntil("the fleet view to count \(deliveredHere) deliveries of \(bundle)", timeout: .seconds(120), every: .seconds(1)) {
                let report = try await Self.fleet(ports[0])
                let real = report.instances.filter { $0.bundles[bundle] != nil }
                return Set(real.map(\.pid)) == Set(workers.map(\.pid)) && real.reduce(0) { $0 + ($1.bundles[bundle]?.delivered ?? 0) } == deliveredHere
            }
        }
        for worker in workers { #expect(!worker.log.contains("HELD"), "\(worker.logPath) held the registry") }
        print(
            "hostile publisher: tried \(byKind.sorted { $0.key < $1.key }); instances alive \(workers.filter(\.isRunning).count)/\(workers.count); "
                + "valid jobs delivered once \(validIDs.count - duplicated.count)/\(validIDs.count); refused messages dead with body unchanged "
                + "\(deadFound)/\(deadExpected.values.map(\.count).reduce(0, +)); registrations applied \(registered); /ready failures \(notReady.count)")
    }

    /// Every page of `/api/fleet` (its `next` cursor followed): forged heartbeats can push a
    /// real instance past the first page's 2 MiB.
    static func fleet(_ port: Int) async throws -> FleetReport {
        var cursor: String?
        var whole: FleetReport?
        repeat {
            let after = cursor.map { "?after=" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? ""
            let result = try await runProcess("/usr/bin/curl", ["-s", "http://127.0.0.1:\(port)/api/fleet\(after)"])
            let page = try FleetJSON.decoder.decode(FleetReport.self, from: Data(result.stdout.utf8))
            if whole == nil { whole = page } else { whole?.instances += page.instances }
            cursor = page.next
        } while cursor != nil
        return whole!
    }
}
}

/// Polls `/ready` of every worker about once a second and remembers every answer that was not 200.
actor ReadyWatch {
    let ports: [Int]
    private(set) var failures: [String] = []

    init(ports: [Int]) { self.ports = ports }

    func watch() async {
        while !Task.isCancelled {
            for port in ports {
                let result = try? await runProcess("/usr/bin/curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30", "http://127.0.0.1:\(port)/ready"])
                let status = result?.stdout.trimmingCharacters(in: .whitespacesAndNewlines) ?? "no answer"
                if status != "200", !Task.isCancelled { failures.append("port \(port): \(status)") }
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }
}
