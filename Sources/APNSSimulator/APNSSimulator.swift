/// APNSSimulator: a local APNs that behaves like Apple over TLS + HTTP/2, with scripted outcomes
/// per device token and fault injection adjustable at runtime, for tests, benchmarks and the local
/// run (`apns-worker simulator`). Apple's validation lives in `RequestValidator`, the decisions in
/// `SimulatorEngine`, the protocol in the channel handlers; this file owns the listener.
import APNSCore
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
    private let logger: Logger

    /// The port the simulator listens on (the ephemeral one when configured with 0).
    public let port: Int
    public let configuration: SimulatorConfiguration

    private init(configuration: SimulatorConfiguration, engine: SimulatorEngine, registry: ConnectionRegistry, serverChannel: any Channel, logger: Logger) {
        self.configuration = configuration
        self.engine = engine
        self.registry = registry
        self.serverChannel = serverChannel
        self.logger = logger
        self.port = serverChannel.localAddress?.port ?? configuration.port
    }

    /// Binds the listener and returns once it accepts connections.
    public static func start(_ configuration: SimulatorConfiguration, logger: Logger) async throws -> APNSSimulator {
        let sslContext = try NIOSSLContext(configuration: try makeTLSConfiguration(configuration.tls))
        let engine = SimulatorEngine(configuration: configuration)
        let registry = ConnectionRegistry(engine: engine)

        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try configureConnection(
                        channel, sslContext: sslContext, engine: engine, registry: registry, logger: logger)
                }
            }
            .bind(host: configuration.host, port: configuration.port)
            .get()
        let simulator = APNSSimulator(
            configuration: configuration, engine: engine, registry: registry, serverChannel: channel, logger: logger)
        logger.info(
            "APNs simulator listening",
            metadata: [
                "simulator.host": "\(configuration.host)", "simulator.port": "\(simulator.port)",
                "simulator.bundles": "\(configuration.bundleIDs.joined(separator: ","))",
            ])
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

    private static func configureConnection(
        _ channel: any Channel, sslContext: NIOSSLContext, engine: SimulatorEngine, registry: ConnectionRegistry, logger: Logger
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
                let admission = connection.streamOpened(goawayAfter: engine.faults.goawayAfterStreams)
                if case .processAndGoAway = admission, let parent = stream.parent,
                    let streamID = try? stream.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)
                {
                    // Sent on the next loop turn: the HTTP/2 handler is in the middle of a read.
                    parent.eventLoop.execute {
                        var debugData = parent.allocator.buffer(capacity: 32)
                        debugData.writeString("{\"reason\":\"Shutdown\"}")
                        let goaway = HTTP2Frame(
                            streamID: .rootStream,
                            payload: .goAway(lastStreamID: streamID, errorCode: .noError, opaqueData: debugData))
                        parent.writeAndFlush(goaway, promise: nil)
                        engine.updateCounters { $0.goawaysSent += 1 }
                    }
                }
                try stream.pipeline.syncOperations.addHandler(
                    StreamHandler(engine: engine, connection: connection, admission: admission))
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

    /// Closes the listener and every connection.
    public func shutdown() async throws {
        try? await serverChannel.close()
        for channel in registry.all {
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
