/// APNSSimulator: a local APNs that behaves like Apple over TLS + HTTP/2, with scripted outcomes
/// per device token and fault injection adjustable at runtime, for tests, benchmarks and the local
/// run (`apns-worker simulator`); optionally also Apple's legacy binary gateway and feedback
/// service (`BinaryGateway.swift`), and Apple's channel management service for broadcast push on
/// a port of its own (`SimulatorEngine+Channels.swift`). Apple's validation lives in `RequestValidator`, the decisions
/// in `SimulatorEngine`, the protocol in the channel handlers; this file owns the listeners.
import APNSBinaryProtocol
import APNSModel
import Logging
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import ServiceLifecycle

public final class APNSSimulator: Sendable, Service {
    private let engine: SimulatorEngine
    private let registry: ConnectionRegistry
    private let serverChannel: any Channel
    private let legacyRegistries: [ConnectionRegistry]
    private let legacyChannels: [any Channel]
    private let logger: Logger

    /// The port the simulator listens on (the ephemeral one when configured with 0).
    public let port: Int
    /// The binary gateway's port, nil when `configuration.binaryPort` is nil.
    public let binaryPort: Int?
    /// The feedback service's port, nil when `configuration.feedbackPort` is nil.
    public let feedbackPort: Int?
    /// The channel management service's port, nil when `configuration.channelPort` is nil.
    public let channelPort: Int?
    public let configuration: SimulatorConfiguration

    private init(
        configuration: SimulatorConfiguration, engine: SimulatorEngine, registry: ConnectionRegistry, serverChannel: any Channel,
        binary: (channel: any Channel, registry: ConnectionRegistry)?, feedback: (channel: any Channel, registry: ConnectionRegistry)?,
        channels: (channel: any Channel, registry: ConnectionRegistry)?, logger: Logger
    ) {
        self.configuration = configuration
        self.engine = engine
        self.registry = registry
        self.serverChannel = serverChannel
        self.legacyRegistries = [binary?.registry, feedback?.registry, channels?.registry].compactMap { $0 }
        self.legacyChannels = [binary?.channel, feedback?.channel, channels?.channel].compactMap { $0 }
        self.logger = logger
        self.port = serverChannel.localAddress?.port ?? configuration.port
        self.binaryPort = binary.map { $0.channel.localAddress?.port ?? configuration.binaryPort ?? 0 }
        self.feedbackPort = feedback.map { $0.channel.localAddress?.port ?? configuration.feedbackPort ?? 0 }
        self.channelPort = channels.map { $0.channel.localAddress?.port ?? configuration.channelPort ?? 0 }
    }

    /// Binds the listener and returns once it accepts connections.
    /// - Parameter eventLoopGroup: where its connections live; NIO's shared singleton by default.
    ///   Tests that push thousands of requests through a simulator give it a group of its own, so
    ///   its backlog does not delay other tests' connections in the same process.
    public static func start(
        _ configuration: SimulatorConfiguration, logger: Logger,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> APNSSimulator {
        try AppleRules.checkKeys(configuration.tokenKeys)
        let sslContext = try NIOSSLContext(configuration: try makeTLSConfiguration(configuration.tls))
        let engine = SimulatorEngine(configuration: configuration)
        let registry = ConnectionRegistry(engine: engine)

        let channel = try await bindHTTP2Listener(
            group: eventLoopGroup, host: configuration.host, port: configuration.port, sslContext: sslContext, engine: engine,
            registry: registry, service: .push, logger: logger)

        var binary: (channel: any Channel, registry: ConnectionRegistry)?
        var feedback: (channel: any Channel, registry: ConnectionRegistry)?
        do {
            if configuration.binaryPort != nil || configuration.feedbackPort != nil {
                let legacyContext = try NIOSSLContext(configuration: try makeLegacyTLSConfiguration(configuration.tls))
                if let binaryPort = configuration.binaryPort {
                    let binaryRegistry = ConnectionRegistry(engine: engine, listener: .binary)
                    let binaryChannel = try await bindLegacyListener(
                        group: eventLoopGroup, host: configuration.host, port: binaryPort, sslContext: legacyContext,
                        registry: binaryRegistry, logger: logger
                    ) {
                        [ByteToMessageHandler(BinaryFrameSplitter()), BinaryGatewayHandler(engine: engine, logger: logger)]
                    }
                    binary = (binaryChannel, binaryRegistry)
                }
                if let feedbackPort = configuration.feedbackPort {
                    let feedbackRegistry = ConnectionRegistry(engine: engine, listener: .feedback)
                    let feedbackChannel = try await bindLegacyListener(
                        group: eventLoopGroup, host: configuration.host, port: feedbackPort, sslContext: legacyContext,
                        registry: feedbackRegistry, logger: logger
                    ) {
                        [FeedbackServiceHandler(engine: engine)]
                    }
                    feedback = (feedbackChannel, feedbackRegistry)
                }
            }
        } catch {
            try? await channel.close()
            try? await binary?.channel.close()
            throw error
        }
        var channels: (channel: any Channel, registry: ConnectionRegistry)?
        if let channelPort = configuration.channelPort {
            do {
                let channelRegistry = ConnectionRegistry(engine: engine, listener: .channelManagement)
                let listener = try await bindHTTP2Listener(
                    group: eventLoopGroup, host: configuration.host, port: channelPort, sslContext: sslContext, engine: engine,
                    registry: channelRegistry, service: .channelManagement, logger: logger)
                channels = (listener, channelRegistry)
            } catch {
                try? await channel.close()
                try? await binary?.channel.close()
                try? await feedback?.channel.close()
                throw error
            }
        }

        let simulator = APNSSimulator(
            configuration: configuration, engine: engine, registry: registry, serverChannel: channel, binary: binary,
            feedback: feedback, channels: channels, logger: logger)
        var metadata: Logger.Metadata = [
            "simulator.host": "\(configuration.host)", "simulator.port": "\(simulator.port)",
            "simulator.bundles": "\(configuration.bundleIDs.joined(separator: ","))",
        ]
        if let port = simulator.binaryPort { metadata["simulator.binary_port"] = "\(port)" }
        if let port = simulator.feedbackPort { metadata["simulator.feedback_port"] = "\(port)" }
        if let port = simulator.channelPort { metadata["simulator.channel_port"] = "\(port)" }
        logger.info("APNs simulator listening", metadata: metadata)
        return simulator
    }

    private static func makeTLSConfiguration(_ tls: SimulatorTLSConfiguration) throws -> TLSConfiguration {
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(tls.certificateChainPEM.utf8)).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(bytes: Array(tls.privateKeyPEM.utf8), format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.applicationProtocols = ["h2"]
        if let caPEM = tls.clientCAPEM {
            let roots = try NIOSSLCertificate.fromPEMBytes(Array(caPEM.utf8))
            configuration.trustRoots = .certificates(roots)
            configuration.certificateVerification = tls.requireClientCertificate ? .noHostnameVerification : .optionalVerification
        } else {
            configuration.certificateVerification = .none
        }
        return configuration
    }

    /// A TLS + HTTP/2 listener playing one of Apple's services.
    private static func bindHTTP2Listener(
        group: any EventLoopGroup, host: String, port: Int, sslContext: NIOSSLContext, engine: SimulatorEngine,
        registry: ConnectionRegistry, service: StreamHandler.Service, logger: Logger
    ) async throws -> any Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try configureConnection(
                        channel, sslContext: sslContext, engine: engine, registry: registry, service: service, logger: logger)
                }
            }
            .bind(host: host, port: port)
            .get()
    }

    private static func configureConnection(
        _ channel: any Channel, sslContext: NIOSSLContext, engine: SimulatorEngine, registry: ConnectionRegistry,
        service: StreamHandler.Service, logger: Logger
    ) throws {
        let connection = ConnectionState()
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(NIOSSLServerHandler(context: sslContext))
        try pipeline.addHandler(ConnectionObserver(connection: connection, registry: registry, logger: logger))

        var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
        let initialLimit = engine.configuration.maxConcurrentStreamsBeforeFirstToken ?? engine.currentStreamLimit
        connectionConfiguration.initialSettings =
            nioDefaultSettings.filter { $0.parameter != .maxConcurrentStreams }
            + [HTTP2Setting(parameter: .maxConcurrentStreams, value: initialLimit)]
        _ = try pipeline.configureHTTP2Pipeline(
            mode: .server, connectionConfiguration: connectionConfiguration, streamConfiguration: .init()
        ) { stream in
            stream.eventLoop.makeCompletedFuture {
                let streamID = try? stream.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)
                let admission = connection.streamOpened(
                    streamID: streamID.map { Int($0) } ?? 0, goawayAfter: engine.faults.goawayAfterStreams)
                try stream.pipeline.syncOperations.addHandler(
                    StreamHandler(engine: engine, connection: connection, admission: admission, service: service))
            }
        }
    }

    // MARK: Controls

    /// From now on, requests for `token` (hex, either case) that pass validation get `outcome`.
    public func script(token: String, _ outcome: ScriptedOutcome) {
        engine.script(token: token, outcome)
    }

    /// Forgets every scripted outcome: every token is accepted again.
    public func clearScripts() {
        engine.clearScripts()
    }

    /// Replaces the injected faults (and reseeds the random generator). Open connections learn a
    /// new `maxConcurrentStreams` at once through a SETTINGS frame.
    public func setFaults(_ faults: SimulatorFaults) {
        let previousLimit = engine.currentStreamLimit
        engine.setFaults(faults)
        let limit = engine.currentStreamLimit
        guard limit != previousLimit else { return }
        for channel in registry.all {
            let settings = HTTP2Frame(
                streamID: .rootStream, payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: limit)])))
            channel.writeAndFlush(settings, promise: nil)
        }
    }

    public var faults: SimulatorFaults { engine.faults }

    public func counters() -> SimulatorCounters { engine.counters() }

    /// The notifications answered 200, oldest first (at most `configuration.recordLimit`).
    public func accepted() -> [AcceptedNotification] { engine.accepted() }

    public func clearAccepted() { engine.clearAccepted() }

    /// Queues a tuple for the feedback service: the next connection to it receives it (and every
    /// other queued one), after which it is gone. `token` is hexadecimal, either case. With
    /// `topic`, only a connection whose client certificate names that app receives it, as
    /// Apple's service told each app's certificate about its own devices.
    public func addFeedback(token: String, timestamp: UInt32, topic: String? = nil) {
        guard let token = DeviceToken(hex: token) else { preconditionFailure("addFeedback: \(token) is not hexadecimal") }
        engine.addFeedback(FeedbackTuple(timestamp: timestamp, deviceToken: token.bytes), topic: topic)
    }

    /// Every broadcast channel the simulator holds (created and not deleted), with what each
    /// received.
    public func channels() -> [SimulatorChannel] { engine.channels() }

    /// Tuples queued for the feedback service and not yet served.
    public func pendingFeedback() -> [FeedbackTuple] { engine.pendingFeedback }

    /// Closes the listeners and every connection.
    public func shutdown() async throws {
        try? await serverChannel.close()
        for channel in legacyChannels {
            try? await channel.close()
        }
        for channel in registry.all + legacyRegistries.flatMap(\.all) {
            try? await channel.close()
        }
        logger.info("APNs simulator stopped", metadata: ["simulator.port": "\(port)"])
    }

    /// As a lifecycle service: serves until graceful shutdown, then closes everything.
    public func run() async throws {
        try? await gracefulShutdown()
        try await shutdown()
    }
}
