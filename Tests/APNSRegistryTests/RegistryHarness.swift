import AMQPClient
import APNSConfig
import APNSModel
import APNSRegistry
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import NIOCore
import NIOPosix
import TestSupport
import Testing

/// An end-to-end setup for §6: the shared test broker, an in-process simulator for two bundles
/// of the test's own, a fresh registry database, and real `apns-worker run` processes. §6's
/// queues are global names, so the tests that use them run one at a time (`.serialized`) and the
/// harness empties those queues first.
final class RegistryHarness: Sendable {
    let bundles: [String]
    let directory: String
    let simulator: APNSSimulator
    let simulatorGroup: MultiThreadedEventLoopGroup
    let connection: AMQPConnection
    let configPath: String
    let registry: RegistrySettings

    /// With `binarySecondBundle`, `bundles[1]` uses the binary transport (the simulator's
    /// gateway and feedback service, polled every second) instead of HTTP/2.
    /// `syncWindow` is the workers' `[registry] syncWindow`; off unless a test is about it.
    static func start(
        registry: RegistrySettings? = nil, extraBundles: Int = 0, binarySecondBundle: Bool = false, syncWindow: String = "0"
    ) async throws -> RegistryHarness {
        let broker = try TestBroker.require()
        let registry = if let registry { registry } else { try await TestPostgres.freshDatabase() }
        let bundles = [uniqueName("com.example.universal"), uniqueName("com.example.iphone")]
        let directory = NSTemporaryDirectory() + "apnsw-reg-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let credentials = try SimulatorCredentials.generate(into: directory + "/credentials", teamID: "TEAM123456", keyID: "KEY1234567")
        var logger = Logger(label: "registry-e2e.simulator")
        logger.logLevel = .warning
        let simulatorGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var simulatorConfiguration = SimulatorConfiguration(tls: credentials.tlsConfiguration(), bundleIDs: bundles, tokenKeys: [credentials.tokenKey])
        if binarySecondBundle {
            simulatorConfiguration.binaryPort = 0
            simulatorConfiguration.feedbackPort = 0
        }
        let simulator = try await APNSSimulator.start(simulatorConfiguration, logger: logger, eventLoopGroup: simulatorGroup)
        var config = """
            [amqp]
            url = \(broker.amqpURL)
            prefetch = 100
            heartbeat = 5s

            [retry]
            delays = 300ms, 600ms
            maxAttempts = 3

            [admin]
            listen = 127.0.0.1:0

            [worker]
            shutdownDeadline = 10s
            requestTimeout = 30s
            probeInterval = 500ms

            [registry]
            url = postgres://\(registry.url.user):\(registry.url.password ?? "")@\(registry.url.host):\(registry.url.port)/\(registry.url.database)?sslmode=disable
            poolSize = 4
            countsFlushInterval = 200ms
            syncWindow = \(syncWindow)

            """
        for bundle in bundles where !(binarySecondBundle && bundle == bundles[1]) {
            config += """

                [apns "\(bundle)"]
                teamId = TEAM123456
                keyId = KEY1234567
                tokenKeyFile = credentials/AuthKey_KEY1234567.p8
                host = 127.0.0.1
                port = \(simulator.port)
                caFile = credentials/ca.pem
                connections = 1

                """
        }
        if binarySecondBundle {
            config += """

                [apns "\(bundles[1])"]
                transport = binary
                certFile = credentials/client.pem
                keyFile = credentials/client.key
                caFile = credentials/ca.pem
                binaryHoldWindow = 3s
                host = 127.0.0.1
                port = \(simulator.binaryPort ?? 0)
                feedbackPort = \(simulator.feedbackPort ?? 0)
                feedbackInterval = 1s
                connections = 1

                """
        }
        let configPath = directory + "/worker.conf"
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        try await TestPostgres.withStore(registry) { try await $0.migrate() }
        var clientLogger = Logger(label: "registry-e2e.amqp")
        clientLogger.logLevel = .warning
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [broker.amqpURL], connectionName: "registry-e2e"), logger: clientLogger)
        var plan = TopologyPlan(bundleIDs: bundles, retryDelays: [.milliseconds(300), .milliseconds(600)], queueType: .quorum)
        plan.addRegistry(queueType: .quorum)
        // A busy node may not have formed its Raft cluster yet (541): wait as the worker does.
        try await connection.declareWaitingForTheBroker(plan, logger: clientLogger)
        for queue in [TopologyNames.registry, TopologyNames.groups, TopologyNames.registryDead, TopologyNames.groupsDead] {
            _ = try await connection.purgeQueue(queue)
        }
        return RegistryHarness(
            bundles: bundles, directory: directory, simulator: simulator, simulatorGroup: simulatorGroup, connection: connection,
            configPath: configPath, registry: registry)
    }

    private init(
        bundles: [String], directory: String, simulator: APNSSimulator, simulatorGroup: MultiThreadedEventLoopGroup,
        connection: AMQPConnection, configPath: String, registry: RegistrySettings
    ) {
        self.bundles = bundles
        self.directory = directory
        self.simulator = simulator
        self.simulatorGroup = simulatorGroup
        self.connection = connection
        self.configPath = configPath
        self.registry = registry
    }

    func startWorker(_ name: String = "worker") throws -> ChildProcess {
        try ChildProcess(
            workerExecutable, ["run", "--config", configPath], logPath: "\(directory)/\(name).log",
            environment: ["APNS_WORKER_LOG_LEVEL": "info"])
    }

    /// Runs `body` with workers started under `names`; whatever happens they are stopped and the
    /// harness shut down (SIGKILL and their logs printed when `body` throws).
    func withWorkers(_ names: [String] = ["worker"], _ body: ([ChildProcess]) async throws -> Void) async throws {
        var workers: [ChildProcess] = []
        do {
            for name in names { workers.append(try startWorker(name)) }
            try await body(workers)
        } catch {
            for worker in workers {
                worker.kill9()
                print("--- \(worker.logPath) (last lines)\n" + worker.log.split(separator: "\n").suffix(40).joined(separator: "\n"))
            }
            await shutdown()
            throw error
        }
        for worker in workers { await stop(worker) }
        await shutdown()
    }

    /// Stops a worker with SIGTERM and waits for it.
    func stop(_ worker: ChildProcess) async {
        worker.signal(SIGTERM)
        if await worker.waitForExit(timeout: .seconds(60)) == nil { worker.kill9() }
    }

    func shutdown() async {
        await connection.close()
        try? await simulator.shutdown()
        try? await simulatorGroup.shutdownGracefully()
        try? FileManager.default.removeItem(atPath: directory)
    }

    // MARK: - As the sync server

    func register(_ bundle: String, _ token: String, group: String, at: Int64, environment: String? = nil) async throws {
        let env = environment.map { #","environment":"\#($0)""# } ?? ""
        try await publish(TopologyNames.registry, #"{"op":"register","bundleId":"\#(bundle)","token":"\#(token)","group":"\#(group)","at":\#(at)\#(env)}"#)
    }

    func unregister(_ bundle: String, _ token: String, at: Int64) async throws {
        try await publish(TopologyNames.registry, #"{"op":"unregister","bundleId":"\#(bundle)","token":"\#(token)","at":\#(at)}"#)
    }

    func publish(_ exchange: String, _ body: String, messageID: String? = nil) async throws {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = messageID
        try await connection.publishAgainAfterNacks(AMQPOutboundMessage(exchange: exchange, routingKey: "", body: Array(body.utf8), properties: properties))
    }

    // MARK: - Looking

    /// Ready messages plus unacknowledged ones, as the management API counts them.
    func queueIsSettled(_ queue: String) async throws -> Bool {
        let broker = try TestBroker.require()
        guard let info = try await broker.managementJSON("/queues/%2f/\(queue)") as? [String: Any] else { return false }
        return (info["messages"] as? Int ?? -1) == 0
    }

    func messageCount(_ queue: String) async throws -> UInt32 {
        try await connection.inspectQueue(queue).messageCount
    }

    /// Tokens (hex) the simulator accepted for `bundle`, with how often.
    func accepted(_ bundle: String) -> [String: Int] {
        simulator.accepted().filter { $0.topic == bundle }.reduce(into: [:]) { $0[$1.token.lowercased(), default: 0] += 1 }
    }

    /// The worker's admin port, from its log line "admin HTTP server listening".
    static func adminPort(_ worker: ChildProcess) -> Int? {
        guard let line = worker.log.split(separator: "\n").first(where: { $0.contains("admin HTTP server listening") }),
            let range = line.range(of: #"admin\.port=\d+"#, options: .regularExpression)
        else { return nil }
        return Int(line[range].dropFirst("admin.port=".count))
    }

    static func token(_ n: Int) -> String { String(format: "%064x", n &* 2_654_435_761 &+ 0xbeef) }
}

/// The suites whose workers consume the registry's queues on the shared broker. Those queue
/// names are global (contract §6), so two such suites running at once would take each other's
/// registration messages into the wrong database: they run one after the other.
@Suite(.serialized) enum RegistryBrokerSuites {}
