/// A real worker for the admin tests, in process: the shared test broker, an APNs simulator with
/// generated credentials, an HTTP/2 transport and a `WorkerService` with one bundle's pipeline,
/// a `QueueInspector` on connections of its own, and the `AdminService` under test.
import AMQPClient
import APNSAdmin
import APNSConfig
import APNSModel
import APNSOperations
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import APNSTransport
import APNSWorker
import Foundation
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import Synchronization
import TestSupport

/// The process-wide Prometheus collector registry of the test run: swift-metrics can be
/// bootstrapped once per process, and every metric the worker creates afterwards lands here.
enum TestMetrics {
    static let prometheus: PrometheusCollectorRegistry = {
        let prometheus = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(AdminMetrics.factory(prometheus: prometheus))
        return prometheus
    }()
}

final class AdminHarness: Sendable {
    static let token = "test-admin-token-0123456789"
    /// Retry jobs stay in their queue for the length of a test.
    static let retryDelay = Duration.seconds(3600)

    let bundle: String
    let directory: String
    let simulator: APNSSimulator
    let workerConnection: AMQPConnection
    let publisher: AMQPConnection
    let transport: HTTP2Transport
    let worker: WorkerService<AMQPConnection>
    let statistics: WorkerStatistics
    let queues: QueueInspector
    let admin: AdminService
    let group: ServiceGroup

    static var logger: Logger {
        var logger = Logger(label: "admin-tests")
        logger.logLevel = .warning
        return logger
    }

    /// Starts everything and runs the worker and transport in the background of `body`.
    static func with<T: Sendable>(_ body: (AdminHarness) async throws -> T) async throws -> T {
        let broker = try TestBroker.require()
        _ = TestMetrics.prometheus
        let bundle = uniqueName("com.example.admin")
        let directory = NSTemporaryDirectory() + "apnsw-admin-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let credentials = try SimulatorCredentials.generate(into: directory + "/credentials", teamID: "TEAM123456", keyID: "KEY1234567")
        let simulator = try await APNSSimulator.start(
            SimulatorConfiguration(tls: credentials.tlsConfiguration(), bundleIDs: [bundle], tokenKeys: [credentials.tokenKey]),
            logger: logger)

        let amqp = try AMQPConfiguration(urlStrings: [broker.amqpURL], connectionName: "admin-test-worker")
        let workerConnection = try await AMQPConnection.connect(configuration: amqp, logger: logger)
        let publisher = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [broker.amqpURL], connectionName: "admin-test-publisher"), logger: logger)
        let plan = TopologyPlan(bundleIDs: [bundle], retryDelays: [retryDelay], queueType: .quorum)
        try await publisher.declareWaitingForTheBroker(plan, logger: logger)

        var configuration = HTTP2TransportConfiguration(
            environment: .production,
            authentication: .token(ProviderTokenSource(teamID: credentials.teamID, keyID: credentials.keyID, key: credentials.tokenPrivateKey)),
            host: "127.0.0.1", port: simulator.port)
        configuration.trustRoots = .caFile(credentials.caCertificatePath)
        configuration.connections = 2
        let transport = try HTTP2Transport(configuration: configuration, logger: logger)
        let statistics = WorkerStatistics()
        let pipeline = BundlePipeline(
            settings: .init(
                bundleID: bundle, prefetch: 20, retryPolicy: RetryPolicy(delays: [retryDelay], maxAttempts: 3),
                probeInterval: .seconds(60), shutdownDeadline: .seconds(5)),
            broker: workerConnection, transport: PerEnvironmentTransport([.production: transport]), statistics: statistics, logger: logger)
        let worker = WorkerService(broker: workerConnection, topology: plan, pipelines: [pipeline], logger: logger)
        let queues = QueueInspector(amqp: amqp, bundleIDs: [bundle], retryDelays: [retryDelay], logger: logger, deliveryWait: .seconds(10), handBackWait: .seconds(30))
        let admin = try AdminService(
            settings: AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: token), worker: worker, queues: queues,
            prometheus: TestMetrics.prometheus, logger: logger)
        let group = ServiceGroup(services: [transport, worker], logger: logger)
        let harness = AdminHarness(
            bundle: bundle, directory: directory, simulator: simulator, workerConnection: workerConnection, publisher: publisher,
            transport: transport, worker: worker, statistics: statistics, queues: queues, admin: admin, group: group)

        let result: Result<T, any Error> = await withTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try? await group.run() }
            let result: Result<T, any Error>
            do {
                // Every test starts from a ready worker (its topology declared, its broker
                // connected), as an operator's probe would see it; on a loaded machine that
                // takes a moment after `run()` starts.
                try await waitUntil("the harness's worker is ready", timeout: .seconds(60)) { worker.status().isReady }
                result = .success(try await body(harness))
            } catch { result = .failure(error) }
            await group.triggerGracefulShutdown()
            await tasks.waitForAll()
            return result
        }
        for name in [TopologyNames.workQueue(bundle), TopologyNames.deadQueue(bundle), TopologyNames.retryQueue(bundle, delay: retryDelay)] {
            _ = try? await publisher.deleteQueue(name)
        }
        await publisher.close()
        await workerConnection.close()
        try? await simulator.shutdown()
        return try result.get()
    }

    private init(
        bundle: String, directory: String, simulator: APNSSimulator, workerConnection: AMQPConnection, publisher: AMQPConnection,
        transport: HTTP2Transport, worker: WorkerService<AMQPConnection>, statistics: WorkerStatistics, queues: QueueInspector, admin: AdminService,
        group: ServiceGroup
    ) {
        self.bundle = bundle
        self.directory = directory
        self.simulator = simulator
        self.workerConnection = workerConnection
        self.publisher = publisher
        self.transport = transport
        self.worker = worker
        self.statistics = statistics
        self.queues = queues
        self.admin = admin
        self.group = group
    }

    // MARK: - Jobs as the sync server publishes them

    static func token(_ n: Int) -> String { String(format: "%064x", n &* 2_654_435_761 &+ 0x5eed) }

    /// A well-formed job for device token `n`; returns its id.
    @discardableResult
    func publishJob(token n: Int, alert: String = "Hello") async throws -> String {
        let id = UUID().uuidString
        try await publish(#"{"token":"\#(Self.token(n))","payload":{"aps":{"alert":"\#(alert)"}},"id":"\#(id)"}"#, id: id)
        return id
    }

    /// A job the worker dead-letters without asking Apple (unknown push type), carrying markup in
    /// its body that the HTML page must show as text.
    @discardableResult
    func publishMalformedJob() async throws -> String {
        let id = UUID().uuidString
        try await publish(
            #"{"token":"\#(Self.token(99))","payload":{"aps":{"alert":"<script>alert('x')</script>"}},"id":"\#(id)","pushType":"<b>bogus</b>"}"#,
            id: id)
        return id
    }

    func publish(_ body: String, id: String) async throws {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = id
        try await publisher.publishAgainAfterNacks(
            AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: bundle, body: Array(body.utf8), properties: properties))
    }

    func jobs(_ end: String) -> Int { statistics.activity(bundle: bundle).jobs[end, default: 0] }
}

/// Runs the admin server `make` builds (with `extra` services beside it) on a free port for
/// `body`, then shuts both down. `make` gets the callback that learns the bound port.
func servingAdmin(
    extra: [any Service] = [], _ make: (@escaping @Sendable (Int) async -> Void) throws -> AdminService,
    _ body: (Int) async throws -> Void
) async throws {
    let port = Mutex<Int?>(nil)
    let admin = try make { bound in port.withLock { $0 = bound } }
    let group = ServiceGroup(services: [admin] + extra, logger: AdminHarness.logger)
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        do {
            try await waitUntil("the admin server to listen") { port.withLock { $0 } != nil }
            try await body(port.withLock { $0! })
        } catch {
            await group.triggerGracefulShutdown()
            throw error
        }
        await group.triggerGracefulShutdown()
        try await tasks.waitForAll()
    }
}
