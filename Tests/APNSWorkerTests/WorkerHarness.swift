import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import NIOCore
import NIOPosix
import TestSupport

/// One end-to-end setup: the shared test broker (or a private one), an in-process simulator
/// with generated credentials, a configuration file for a bundle of the test's own, and real
/// `apns-worker run` processes started from the built executable.
final class WorkerHarness: Sendable {
    let bundle: String
    /// `bundle` first, then `Options.extraBundles` more, each with its own section and queues.
    let bundles: [String]
    let directory: String
    let broker: BrokerCoordinates
    let credentials: GeneratedCredentials
    let simulator: APNSSimulator
    /// The simulator's own thread: the worker pushes thousands of jobs through it, and on NIO's
    /// shared group that backlog would delay every other test's connections in this process.
    let simulatorGroup: MultiThreadedEventLoopGroup
    let connection: AMQPConnection
    let configPath: String
    /// A queue of the test's own bound to `apns.feedback` with the bundle's routing key.
    let feedbackQueue: String

    struct Options {
        /// `[retry] delays`; the harness declares the same retry queues the worker will.
        var retryDelays: [Duration] = [.milliseconds(300), .milliseconds(600)]
        var maxAttempts = 3
        /// `[amqp] prefetch`, written: the most unacked jobs each bundle's consumer holds (with
        /// `maxInFlight` shared between the bundles, at most its share); the window stays there.
        var prefetch = 100
        /// `[amqp] maxInFlight`; nil: the product's default.
        var maxInFlight: Int?
        var probeInterval = "500ms"
        var shutdownDeadline = "10s"
        /// Long: a job whose answer is late would be sent again, and the exactly-once counts of
        /// these tests would see a duplicate that only a slow machine made.
        var requestTimeout = "30s"
        var connections = 2
        /// More `key = value` lines for the bundle's section.
        var bundleLines = ""
        /// More `key = value` lines for the `[worker]` section.
        var workerLines = ""
        /// Set: the bundle uses `transport = binary` with the simulator's client certificate
        /// against its binary gateway, with this `binaryHoldWindow`.
        var binaryHoldWindow: String?
        /// The worker's `[amqp] url` lines (a failover list); nil: the broker's own URL.
        var workerURLs: [String]?
        /// More `key = value` lines for the `[amqp]` section.
        var amqpLines = ""
        /// More `key = value` lines for the `[admin]` section.
        var adminLines = ""
        /// The failover list of the harness's own connection; nil: the broker's own URL.
        var clientURLs: [String]?
        /// How many accepted notifications the simulator keeps for `acceptedIDs()` (its default
        /// keeps 10,000): at least the jobs and their duplicates, or the oldest are forgotten.
        var recordLimit: Int?
        /// Set: the simulator also runs Apple's channel management service (broadcast, §7).
        var channelManagement = false
        /// Set: the simulator also runs Apple's legacy feedback service (`simulator.feedbackPort`).
        var feedbackService = false
        /// More bundles configured like `bundle` (sections of their own, same credentials).
        var extraBundles = 0
        /// More credential sets the simulator trusts (its token key, its CA for client
        /// certificates), one per key ID, in `credentials-<keyID>/`; the client certificate of
        /// each names `rotated.<keyID>` (`extraClientTopic`): a rotation test sees which one it got.
        var extraCredentials: [String] = []
        /// The last this many of `bundles` are configured in the worker but not in the simulator:
        /// their topics are another team's, answered `TopicDisallowed`.
        var simulatorDisallowsLastBundles = 0
        /// The simulator's environment: `sandbox` answers with `apns-unique-id`, as Apple's development one.
        var simulatorEnvironment = APNSEnvironment.production
    }

    /// The topic the client certificate of an `Options.extraCredentials` set names.
    static func extraClientTopic(_ keyID: String) -> String { "rotated.\(keyID)" }

    static func start(broker: BrokerCoordinates, options: Options = Options()) async throws -> WorkerHarness {
        let bundle = uniqueName("com.example.e2e")
        let bundles = [bundle] + (0..<options.extraBundles).map { _ in uniqueName("com.example.e2e") }
        let directory = NSTemporaryDirectory() + "apnsw-e2e-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let credentials = try SimulatorCredentials.generate(into: directory + "/credentials", teamID: "TEAM123456", keyID: "KEY1234567")
        var logger = Logger(label: "e2e.simulator")
        logger.logLevel = .warning
        let extraCredentials = try options.extraCredentials.map { keyID in
            try SimulatorCredentials.generate(
                into: directory + "/credentials-\(keyID)", teamID: "TEAM123456", keyID: keyID, clientBundleID: extraClientTopic(keyID))
        }
        var tls = credentials.tlsConfiguration()
        tls.clientCAPEM = ([credentials] + extraCredentials).map(\.caCertificatePEM).joined()
        var simulatorConfiguration = SimulatorConfiguration(
            tls: tls, bundleIDs: Array(bundles.dropLast(options.simulatorDisallowsLastBundles)),
            tokenKeys: [credentials.tokenKey] + extraCredentials.map(\.tokenKey),
            environment: options.simulatorEnvironment)
        if options.binaryHoldWindow != nil { simulatorConfiguration.binaryPort = 0 }
        if let recordLimit = options.recordLimit { simulatorConfiguration.recordLimit = recordLimit }
        if options.channelManagement { simulatorConfiguration.channelPort = 0 }
        if options.feedbackService { simulatorConfiguration.feedbackPort = 0 }
        let simulatorGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let simulator = try await APNSSimulator.start(simulatorConfiguration, logger: logger, eventLoopGroup: simulatorGroup)
        let authenticationLines: String
        if let holdWindow = options.binaryHoldWindow {
            authenticationLines = """
                transport = binary
                certFile = credentials/client.pem
                keyFile = credentials/client.key
                binaryHoldWindow = \(holdWindow)
                host = 127.0.0.1
                port = \(simulator.binaryPort ?? 0)
                connections = 1
                """
        } else {
            authenticationLines = """
                teamId = TEAM123456
                keyId = KEY1234567
                tokenKeyFile = credentials/AuthKey_KEY1234567.p8
                host = 127.0.0.1
                port = \(simulator.port)
                connections = \(options.connections)
                """
        }
        let bundleSections = bundles.map { id in
            "[apns \"\(id)\"]\n\(authenticationLines)\ncaFile = credentials/ca.pem\n\(options.bundleLines)\n"
        }.joined(separator: "\n")
        let configPath = directory + "/worker.conf"
        let config = """
            [amqp]
            \((options.workerURLs ?? [broker.amqpURL]).map { "url = \($0)" }.joined(separator: "\n"))
            prefetch = \(options.prefetch)
            \(options.maxInFlight.map { "maxInFlight = \($0)" } ?? "")
            heartbeat = 5s
            \(options.amqpLines)

            [retry]
            delays = \(options.retryDelays.map { "\(Int($0 / .milliseconds(1)))ms" }.joined(separator: ", "))
            maxAttempts = \(options.maxAttempts)

            [admin]
            listen = 127.0.0.1:0
            \(options.adminLines)

            [worker]
            shutdownDeadline = \(options.shutdownDeadline)
            requestTimeout = \(options.requestTimeout)
            probeInterval = \(options.probeInterval)
            \(options.workerLines)

            \(bundleSections)
            """
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)

        var clientLogger = Logger(label: "e2e.amqp")
        clientLogger.logLevel = .warning
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: options.clientURLs ?? [broker.amqpURL], connectionName: "e2e-test"), logger: clientLogger)
        // The worker declares the same plan; declaring it here first lets the test bind its
        // feedback queue and publish before any worker runs.
        // A busy node may not have formed its Raft cluster yet (541): wait as the worker does.
        try await connection.declareWaitingForTheBroker(
            TopologyPlan(bundleIDs: bundles, retryDelays: options.retryDelays, queueType: .quorum), logger: clientLogger)
        let feedbackQueue = uniqueName("e2e.feedback")
        _ = try await connection.declareQueue(QueueDeclaration(name: feedbackQueue))
        try await connection.bind(BindingDeclaration(queue: feedbackQueue, exchange: TopologyNames.feedbackExchange, routingKey: bundle))
        return WorkerHarness(
            bundle: bundle, bundles: bundles, directory: directory, broker: broker, credentials: credentials, simulator: simulator,
            simulatorGroup: simulatorGroup, connection: connection, configPath: configPath, feedbackQueue: feedbackQueue)
    }

    private init(
        bundle: String, bundles: [String], directory: String, broker: BrokerCoordinates, credentials: GeneratedCredentials,
        simulator: APNSSimulator, simulatorGroup: MultiThreadedEventLoopGroup, connection: AMQPConnection, configPath: String,
        feedbackQueue: String
    ) {
        self.bundle = bundle
        self.bundles = bundles
        self.directory = directory
        self.broker = broker
        self.credentials = credentials
        self.simulator = simulator
        self.simulatorGroup = simulatorGroup
        self.connection = connection
        self.configPath = configPath
        self.feedbackQueue = feedbackQueue
    }

    /// Starts `apns-worker run` on this harness's configuration; its log goes to `name.log`
    /// (`logLevel` debug: every job's end line too).
    func startWorker(_ name: String = "worker", logLevel: String = "info") throws -> ChildProcess {
        try ChildProcess(
            workerExecutable, ["run", "--config", configPath], logPath: "\(directory)/\(name).log",
            environment: ["APNS_WORKER_LOG_LEVEL": logLevel])
    }

    func shutdown() async {
        _ = try? await connection.deleteQueue(feedbackQueue)
        await connection.close()
        try? await simulator.shutdown()
        try? await simulatorGroup.shutdownGracefully()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The lines of a worker's log that say it lost its broker connection, but for a busy
    /// node's `541 … cluster_not_formed` while the worker declared its queues: a node under
    /// load answers that for a while (the worker waits and declares again), which says nothing
    /// of the messages a test sends.
    static func connectionLosses(in log: String) -> [Substring] {
        log.split(separator: "\n").filter { $0.contains("AMQP connection lost") && !$0.contains("cluster_not_formed") }
    }

    // MARK: - Publishing as the sync server

    static func token(_ n: Int) -> String {
        // 32 bytes of hex, distinct per n.
        String(format: "%064x", n &* 2_654_435_761 &+ 0x5eed)
    }

    @discardableResult
    func publishJob(
        token: String, id: UUID = UUID(), payload: String = #"{"aps":{"alert":"Hello"}}"#, extra: String = "", bundle: String? = nil
    ) async throws -> UUID {
        let body = #"{"token":"\#(token)","payload":\#(payload),"id":"\#(id.uuidString)"\#(extra)}"#
        try await publishRaw(Array(body.utf8), messageID: id.uuidString, routingKey: bundle)
        return id
    }

    func publishRaw(_ body: [UInt8], messageID: String? = nil, routingKey: String? = nil, headers: AMQPTable? = nil) async throws {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = messageID
        properties.headers = headers
        properties.appID = "sync-server-test"
        try await connection.publishAgainAfterNacks(
            AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: routingKey ?? bundle, body: body, properties: properties))
    }

    /// Publishes `count` good jobs, up to 200 waiting for their confirms at once, to `bundle`
    /// (the harness's own by default) with the tokens `token(firstToken)` on; their ids.
    func publishMany(_ count: Int, bundle: String? = nil, firstToken: Int = 0) async throws -> [UUID] {
        let ids = (0..<count).map { _ in UUID() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, id) in ids.enumerated() {
                if index >= 200 { try await group.next() }
                group.addTask { try await self.publishJob(token: Self.token(firstToken + index), id: id, bundle: bundle) }
            }
            try await group.waitForAll()
        }
        return ids
    }

    // MARK: - Looking at the outcome

    /// Takes every message now in `queue` (acked: the test owns these queues), keeping what the
    /// worker wrote for the schema check (`ContractCapture`).
    func drain(_ queue: String) async throws -> [AMQPDelivery] {
        var out: [AMQPDelivery] = []
        while let delivery = try await connection.get(queue: queue) {
            out.append(delivery)
            ContractCapture.record(delivery, from: queue, isFeedback: queue == feedbackQueue)
            await connection.ack(delivery)
        }
        return out
    }

    func messageCount(_ queue: String) async throws -> UInt32 {
        try await connection.inspectQueue(queue).messageCount
    }

    /// Distinct apns-ids the simulator accepted, and how many acceptances in all.
    func acceptedIDs() -> (distinct: Set<String>, total: Int) {
        let accepted = simulator.accepted().filter { $0.topic == bundle }
        return (Set(accepted.map { $0.apnsID.lowercased() }), accepted.count)
    }

    /// How many times the simulator accepted each device token (hex).
    func acceptedTokenCounts() -> [String: Int] {
        simulator.accepted().reduce(into: [:]) { $0[$1.token, default: 0] += 1 }
    }

    var workQueue: String { TopologyNames.workQueue(bundle) }
    var deadQueue: String { TopologyNames.deadQueue(bundle) }
}
