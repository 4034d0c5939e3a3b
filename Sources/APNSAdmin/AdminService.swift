/// The admin HTTP server as a ServiceLifecycle `Service` that `apns-worker run` adds to its
/// ServiceGroup: a Hummingbird 2 application (`AdminApplication`, whose `run()` is ours, to keep
/// ICU out of the process) on `[admin] listen` with the routes of
/// `AdminRoutes`, behind the access checks of `AdminAuthentication` and the bound on operator
/// requests of `AdminRequestLimit`; over TLS (HummingbirdTLS) with `[admin] certFile`/`keyFile`.
/// Connections are bounded too (`AdminConnectionLimits`): an idle one is closed, and past a number
/// open at once the server stops accepting until one closes.
import APNSConfig
import APNSOperations
import APNSRegistry
import APNSWorker
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL
import Prometheus
import ServiceLifecycle

public final class AdminService: Service, Sendable {
    public let settings: AdminSettings
    let worker: any WorkerStatusProviding
    let queues: QueueInspector?
    /// The Prometheus collector registry `/metrics` renders (not the device registry).
    let prometheus: PrometheusCollectorRegistry?
    /// The gauges sampled on each `/metrics` scrape, kept for the server's life.
    let metrics = AdminMetrics()
    let logger: Logger
    let onListening: @Sendable (Int) async -> Void
    /// The device registry's store, when the worker has a `[registry]` (its routes and page parts).
    public let registry: RegistryStore?
    /// This instance's fleet service (`apns-worker run`): `/api/fleet`, pause and resume, the
    /// page's fleet-wide view. Nil shows this instance only and answers the fleet routes 503.
    public let fleet: (any FleetOperating)?
    /// Operator requests served at once; more are answered 503 (`AdminRequestLimit`).
    public let requestGate: AdminRequestGate
    /// Broadcast channel management (contract §7) for `/api/bundles/{b}/channels`; nil leaves
    /// those routes out.
    public let channels: (any BroadcastChannelManaging)?

    /// Operator requests (listings, moves, the page) served at once by default: each listing
    /// holds up to a page of messages and a broker connection of its own.
    public static let defaultConcurrentRequests = 4
    /// How long a connection may stay idle and how many may be open at once.
    public let connectionLimits: AdminConnectionLimits

    /// - Parameters:
    ///   - worker: the running worker's state (`WorkerService`).
    ///   - queues: reads and moves dead and retry jobs on a broker connection of its own; nil
    ///     leaves the queue routes answering 503 and the page without depths and dead jobs.
    ///   - prometheus: what `/metrics` renders; nil answers 503 (metrics not bootstrapped).
    ///   - registry: the device registry's store, when the worker has a `[registry]`.
    ///   - onListening: called with the bound port once the server listens (port 0 in tests).
    /// - Throws: `AdminConfigurationError` when `listen` is beyond loopback and no token is set
    ///   (the configuration loader already refuses that; this guards settings built in code).
    public init(
        settings: AdminSettings, worker: any WorkerStatusProviding, queues: QueueInspector?,
        prometheus: PrometheusCollectorRegistry?, logger: Logger, registry: RegistryStore? = nil, fleet: (any FleetOperating)? = nil,
        channels: (any BroadcastChannelManaging)? = nil, concurrentRequests: Int = defaultConcurrentRequests,
        connectionLimits: AdminConnectionLimits = AdminConnectionLimits(),
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws {
        self.requestGate = AdminRequestGate(limit: concurrentRequests)
        self.connectionLimits = connectionLimits
        self.channels = channels
        self.registry = registry
        self.fleet = fleet
        if settings.token == nil, !settings.listen.isLoopback {
            throw AdminConfigurationError(
                description: "[admin] token: required when listen (\(settings.listen)) is not a loopback address")
        }
        self.settings = settings
        self.worker = worker
        self.queues = queues
        self.prometheus = prometheus
        var logger = logger
        logger[metadataKey: "admin.listen"] = "\(settings.listen)"
        self.logger = logger
        self.onListening = onListening
    }

    /// The router with every route and the access checks; also what HummingbirdTesting drives.
    public func makeRouter() -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: AdminAuthentication(
            token: settings.token, metricsToken: settings.metricsToken, hosts: AdminHostAllowlist(listenHost: settings.listen.host, allowed: settings.allowedHosts)))
        router.add(middleware: AdminRequestLimit(gate: requestGate))
        AdminRoutes(
            worker: worker, queues: queues, prometheus: prometheus, metrics: metrics, token: settings.token, secureCookies: settings.usesTLS, logger: logger,
            fleet: fleet
        ).register(on: router)
        if let registry { AdminRegistryRoutes(store: registry).register(on: router) }
        if let channels { AdminChannelRoutes(channels: channels).register(on: router) }
        return router
    }

    /// The plain HTTP application (without `certFile`; the router tests use it either way).
    public func makeApplication() -> some ApplicationProtocol {
        AdminApplication(
            responder: makeRouter().buildResponder(), server: .http1(configuration: http1Configuration), configuration: applicationConfiguration,
            logger: logger, serverRunning: serverRunning)
    }

    /// The HTTPS application of `[admin] certFile`/`keyFile`.
    public func makeTLSApplication() throws -> some ApplicationProtocol {
        guard let certFile = settings.certFile, let keyFile = settings.keyFile else {
            throw AdminConfigurationError(description: "[admin] certFile and keyFile: both are needed to serve TLS")
        }
        let chain = try NIOSSLCertificate.fromPEMFile(certFile).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(file: keyFile, format: .pem)
        let tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        return AdminApplication(
            responder: makeRouter().buildResponder(), server: try .tls(.http1(configuration: http1Configuration), tlsConfiguration: tls),
            configuration: applicationConfiguration, logger: logger, serverRunning: serverRunning)
    }

    private var applicationConfiguration: ApplicationConfiguration {
        ApplicationConfiguration(
            address: .hostname(settings.listen.host, port: settings.listen.port), serverName: "apns-worker",
            availableConnectionsDelegate: MaximumAvailableConnections(connectionLimits.maximumConnections, logger: logger))
    }

    private var http1Configuration: HTTP1Channel.Configuration {
        HTTP1Channel.Configuration(idleTimeout: TimeAmount(connectionLimits.idleTimeout))
    }

    private var serverRunning: @Sendable (any Channel) async -> Void {
        let onListening = self.onListening
        let logger = self.logger
        let scheme = settings.usesTLS ? "https" : "http"
        return { channel in
            let port = channel.localAddress?.port ?? 0
            logger.info("admin HTTP server listening", metadata: ["admin.port": "\(port)", "admin.scheme": "\(scheme)"])
            await onListening(port)
        }
    }

    /// Serves until graceful shutdown.
    public func run() async throws {
        do {
            if settings.usesTLS { try await makeTLSApplication().run() } else { try await makeApplication().run() }
        } catch {
            await queues?.close()
            throw error
        }
        await queues?.close()
    }
}

/// Bounds on the admin server's connections, which Hummingbird enforces. The admin port is behind
/// a token, but a connection is accepted (and holds a socket, buffers and a task) before any
/// request says who it is.
public struct AdminConnectionLimits: Sendable, Hashable {
    /// A connection on which nothing arrives for this long is closed (Hummingbird's HTTP/1
    /// `idleTimeout`: no request bytes, including a request that trickles in slower than that
    /// between reads). The page refreshes every 5 s, so an open page keeps its connection.
    public var idleTimeout: Duration
    /// Connections open at once; past it the server accepts no more until one closes (they wait
    /// in the listen backlog). Browsers open about 6 per origin, a Prometheus scrape one.
    public var maximumConnections: Int

    public static let defaultIdleTimeout = Duration.seconds(60)
    public static let defaultMaximumConnections = 64

    public init(idleTimeout: Duration = defaultIdleTimeout, maximumConnections: Int = defaultMaximumConnections) {
        self.idleTimeout = idleTimeout
        self.maximumConnections = maximumConnections
    }
}

/// Admin settings the server refuses to start with; one line naming the key.
public struct AdminConfigurationError: Error, CustomStringConvertible, Sendable {
    public var description: String
}
