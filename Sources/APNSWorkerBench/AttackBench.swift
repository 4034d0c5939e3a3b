/// `apns-worker-bench attack`: the worker's peak memory (`VmHWM`) while hostile input arrives
/// (docs/benchmarks.md "Memory under attack"). `fleet`: forged heartbeats of
/// `--instances` instances with `--bundles` bundles of 255-byte keys each flood `apns.fleet`
/// while `/fleet/graph` and `/api/fleet` are polled. `dead`: `--jobs` dead jobs of `--mib` MiB sit
/// in the bundle's dead queue while the admin page and `/api/dead?limit=500` are fetched.
/// `bodies`: every consumer's prefetch full of bodies at the 64 KiB limit at once, deliveries to
/// APNs stalled (`AttackBench+Bodies.swift`). Figures only, no asserts; `--worker` runs another build (main's) for the before figure.
import AMQPClient
import APNSFleet
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import ArgumentParser
import Foundation
import Logging

struct AttackBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attack", abstract: "Peak RSS of a worker under forged heartbeats (fleet) or large dead jobs (dead).")

    @Argument(
        help: "fleet, dead, bodies, or view (in this process: what a FleetView holds, measured by malloc, against its own estimate).")
    var scenario: String

    @Option(help: "AMQP URL of a running broker (scripts/broker.sh start).")
    var url: String = ProcessInfo.processInfo.environment["APNS_TEST_AMQP_URL"] ?? "amqp://guest:guest@127.0.0.1:5682/%2f"

    @Option(help: "The apns-worker binary (default: the one beside this benchmark).")
    var worker: String?

    @Option(help: "The worker's admin port.")
    var adminPort: Int = 18_710

    @Option(help: "fleet: forged instances.")
    var instances: Int = 1000

    @Option(help: "fleet: bundles per heartbeat (255-byte keys; about 170 fit in 64 KiB).")
    var bundles: Int = 170

    @Option(help: "fleet: admin paths fetched after each round (comma-separated).")
    var poll: String = "/fleet/graph,/api/fleet,/"

    @Option(help: "fleet: rounds of heartbeats (every instance beats once a round).")
    var rounds: Int = 3

    @Option(help: "dead: dead jobs.")
    var jobs: Int = 100

    @Option(help: "dead: MiB per dead job.")
    var mib: Int = 8

    @Option(help: "dead: fetches of the page and of /api/dead?limit=500.")
    var fetches: Int = 3

    @Option(help: "bodies: bundles (the default in-flight budget of 2,000 is 4 × the default prefetch of 500).")
    var bodyBundles: Int = 4

    @Option(help: "bodies: PostgreSQL URL for a [registry], so apns.registry and apns.groups are consumed too.")
    var postgresURL: String?

    func run() async throws {
        guard ["fleet", "dead", "bodies", "view"].contains(scenario) else { throw ValidationError("scenario: fleet, dead, bodies or view") }
        if scenario == "view" { return measureView() }
        var logger = Logger(label: "bench")
        logger.logLevel = .warning
        let tag = UUID().uuidString.prefix(6).lowercased()
        let bundles = (0..<(scenario == "bodies" ? max(bodyBundles, 1) : 1)).map { "com.example.attack\($0).\(tag)" }
        let bundle = bundles[0]
        let setup = try await BenchWorkerSetup.start(directoryPrefix: "apnsw-attack", bundleIDs: bundles, recordLimit: 10, logger: logger)
        defer { setup.remove() }
        let configPath = setup.directory + "/worker.conf"
        var sections = ""
        if scenario == "bodies" {
            // APNs answers nothing for as long as the bench runs: every job taken stays in flight.
            setup.simulator.setFaults(SimulatorFaults(latency: .seconds(3600)))
            sections += "[worker]\nrequestTimeout = 5m\nshutdownDeadline = 1s\n"
            if let postgresURL { sections += "[registry]\nurl = \(postgresURL)\n" }
        }
        try BenchWorkerSetup.workerConfig(
            url: url, adminKeys: ["listen = 127.0.0.1:\(adminPort)", "heartbeatInterval = 5s"], sections: sections, bundles: bundles,
            port: setup.simulator.port
        ).write(toFile: configPath, atomically: true, encoding: .utf8)
        let process = try setup.startWorker(configPath: configPath, executable: worker)
        defer { if process.isRunning { process.terminate() } }
        let probe = ProcessProbe(pid: process.processIdentifier)
        try await BenchWorkerSetup.waitUntil(limit: .seconds(120)) { get("/health") == 200 }
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [url], connectionName: "attack bench"), logger: logger)
        try await BenchWorkerSetup.waitUntil(limit: .seconds(60)) { (try? await connection.inspectQueue(TopologyNames.deadQueue(bundle))) != nil }
        let idle = probe.peakRSS()
        print("worker \(process.executableURL?.path ?? "?"): peak RSS idle \(String(format: "%.1f", idle)) MiB")
        switch scenario {
        case "fleet": try await fleet(connection, probe, process)
        case "bodies": try await bodies(connection, probe, process, bundles: bundles)
        default: try await dead(connection, probe, process, bundle: bundle)
        }
        // The worker first: its consumers would see their queues deleted.
        process.terminate()
        process.waitUntilExit()
        for bundle in bundles {
            for name in [TopologyNames.workQueue(bundle), TopologyNames.deadQueue(bundle), TopologyNames.retryQueue(bundle, delay: .seconds(1))] {
                _ = try? await connection.deleteQueue(name)
            }
        }
        await connection.close()
        try await setup.simulator.shutdown()
    }

    func fleet(_ connection: AMQPConnection, _ probe: ProcessProbe, _ process: Process) async throws {
        var largest = 0
        for round in 0..<rounds {
            for n in 0..<instances {
                let body = FleetMessage.heartbeat(forgedInstance(n, round: round, startedAt: Date())).encoded()
                largest = max(largest, body.count)
                try await connection.publish(
                    AMQPOutboundMessage(
                        exchange: TopologyNames.fleetExchange, routingKey: "", body: body,
                        properties: AMQPProperties(contentType: "application/json", deliveryMode: 1), mandatory: false))
            }
            for _ in 0..<2 { for path in poll.split(separator: ",") { _ = get(String(path)) } }
            print("round \(round + 1): \(instances) heartbeats of \(bundles) bundles (\(largest / 1024) KiB each); peak RSS \(String(format: "%.1f", probe.peakRSS())) MiB, now \(String(format: "%.1f", probe.rss())) MiB; alive: \(process.isRunning)")
        }
        print("""
            fleet: peak RSS \(String(format: "%.1f", probe.peakRSS())) MiB (fetched after each round: \(poll)); worker alive: \(process.isRunning)
            """)
    }

    func dead(_ connection: AMQPConnection, _ probe: ProcessProbe, _ process: Process, bundle: String) async throws {
        let queue = TopologyNames.deadQueue(bundle)
        let padding = [UInt8](repeating: 0x61, count: mib << 20)
        for index in 0..<jobs {
            var properties = AMQPProperties.persistentJSON
            properties.messageID = "attack-\(index)"
            properties.headers = ["x-apns-reason": .string("BadDeviceToken")]
            let body = Array(#"{"id":"attack-\#(index)","token":"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff","payload":{"pad":""#.utf8)
                + padding + Array(#""}}"#.utf8)
            try await connection.publish(AMQPOutboundMessage(exchange: "", routingKey: queue, body: body, properties: properties))
        }
        print("dead: \(jobs) jobs of \(mib) MiB in \(queue); peak RSS \(String(format: "%.1f", probe.peakRSS())) MiB")
        for fetch in 0..<fetches {
            let page = get("/")
            let api = get("/api/dead?limit=500")
            print("fetch \(fetch + 1): page \(page), /api/dead?limit=500 \(api); peak RSS \(String(format: "%.1f", probe.peakRSS())) MiB; alive: \(process.isRunning)")
        }
        _ = try? await connection.purgeQueue(queue)
    }

    /// Forged instance `n` in `round`: `bundles` bundles whose keys take the most bytes a key
    /// may (`FleetInstance.maxBundleKeyBytes`), each with `round` jobs delivered.
    func forgedInstance(_ n: Int, round: Int, startedAt: Date) -> FleetInstance {
        let keys = (0..<bundles).map { index -> String in
            let head = "forged.\(n).\(index)."
            return head + String(repeating: "x", count: FleetInstance.maxBundleKeyBytes - head.utf8.count)
        }
        return FleetInstance(
            id: "forged-\(n)", host: "forger", pid: 1, version: "6.6.6", startedAt: startedAt, rssBytes: 1, cpuSeconds: 0,
            broker: "connected", heartbeatInterval: 60,
            bundles: Dictionary(uniqueKeysWithValues: keys.map { ($0, FleetInstance.Bundle(delivered: round)) }))
    }

    /// The forged fleet applied to a `FleetView` here, the resident memory it adds beside
    /// `FleetView.bytes`: how honest the view's own account is.
    func measureView() {
        let probe = ProcessProbe(pid: getpid())
        let before = probe.rss()
        var view = FleetView()
        let now = Date()
        for round in 0..<rounds {
            for n in 0..<instances {
                // Decoded from its wire form, as a listener gets it (dictionaries grown as JSON is read).
                let instance = forgedInstance(n, round: round, startedAt: now)
                if case .heartbeat(let heard) = FleetMessage.decode(FleetMessage.heartbeat(instance).encoded()) {
                    view.received(heard, at: now.addingTimeInterval(Double(round)))
                }
            }
        }
        let held = Int((probe.rss() - before) * 1024 * 1024)
        print("""
            view: \(view.live(now: now.addingTimeInterval(Double(rounds))).count) instances, \(view.live(now: now.addingTimeInterval(Double(rounds))).reduce(0) { $0 + $1.bundles.count }) bundles kept; \
            its estimate \(view.bytes / 1024) KiB (instances \(view.instanceBytes / 1024), rates \(view.rates.bytes / 1024)); resident memory grew \(held / 1024) KiB; dropped \(view.dropped)
            """)
    }

    /// The status of a GET on the worker's admin server (curl; 0 when it did not answer), the
    /// body read and dropped.
    func get(_ path: String) -> Int {
        let curl = Process()
        curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        curl.arguments = ["-s", "-o", "/dev/null", "-m", "120", "-w", "%{http_code}", "http://127.0.0.1:\(adminPort)\(path)"]
        let out = Pipe()
        curl.standardOutput = out
        guard (try? curl.run()) != nil else { return 0 }
        curl.waitUntilExit()
        return Int(String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)) ?? 0
    }
}
