import AMQPClient
import APNSModel
import APNSTopology
import Crypto
import APNSAdmin
import APNSConfig
import APNSOperations
import APNSRegistry
import APNSTracing
import APNSTransport
import APNSWorker
import ArgumentParser
import Foundation
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import UnixSignals

/// `apns-worker run`: the worker. Start more instances to scale; they share the queues.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Consume notification jobs and deliver them to APNs until SIGTERM or SIGINT.")

    @Option(name: .customLong("config"), help: "The configuration file.")
    var configPath: String = BrokerOptions.defaultConfigPath

    func run() async throws {
        let configuration = try loadConfiguration(configPath)
        let logger = makeLogger("apns-worker")
        // Before anything creates a metric, so every one of them reaches /metrics.
        let metricsRegistry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(AdminMetrics.factory(registry: metricsRegistry))
        var amqp = try AMQPConfiguration(urlStrings: configuration.amqp.urls, connectionName: "apns-worker run")
        amqp.heartbeat = configuration.amqp.heartbeat
        if let caFile = configuration.amqp.caFile { amqp.tls.caFile = caFile }

        // The registry's schema is migrated before anything starts: a database that cannot be
        // reached is one line naming the file, line and key.
        if let registrySettings = configuration.registry {
            do {
                _ = try await RegistryStore.migrateAtStartUp(registrySettings, logger: logger)
            } catch {
                FileHandle.standardError.write(Data("\(error)\n".utf8))
                throw ExitCode.failure
            }
        }
        // `[tracing]`: the tracer and its exporter; nil leaves the pipelines untraced.
        let tracing = try configuration.tracing.map { try TracingBackend.make($0, logger: logger) }
        // Connected once every service is built on it, just before the service group runs, and
        // closed after the group: after the worker's consumers stopped and its jobs in flight
        // were settled and confirmed.
        let broker = try AMQPConnection(configuration: amqp, logger: logger)
        let registry = try configuration.registry.map { settings in
            var registrySettings = RegistryServiceSettings(
                probeInterval: configuration.worker.probeInterval, queueType: configuration.amqp.queueType,
                syncWindow: settings.syncWindow)
            registrySettings.shutdownDeadline = configuration.worker.shutdownDeadline
            registrySettings.tracing = tracing.map {
                GroupFanOutTracing(tracer: $0.tracer, continuesProducerTrace: configuration.tracing?.parentBased ?? false)
            }
            return RegistryService(
                store: try RegistryStore(settings: settings, logger: logger), broker: broker,
                flushInterval: settings.countsFlushInterval, settings: registrySettings, logger: logger)
        }
        var services: [any Service] = []
        var pipelines: [BundlePipeline<AMQPConnection>] = []
        let statistics = WorkerStatistics()
        let tokenSources = TokenSources()
        // `[amqp] maxInFlight` shared evenly: RabbitMQ bounds each consumer only, so the
        // instance-wide bound is each bundle's consumer asking for its share.
        let budget = configuration.amqp.inFlightBudget
        let bundleShare = budget.share(bundles: configuration.bundles.count)
        let bundlePrefetch = bundleShare.perBundle
        for bundle in configuration.bundles {
            var transports: [APNSEnvironment: any NotificationTransport] = [:]
            for environment in APNSEnvironment.allCases {
                let transport = try makeTransport(
                    bundle, environment: environment, settings: configuration.worker, tokens: tokenSources, window: bundleShare, logger: logger)
                services.append(transport)
                transports[environment] = transport
            }
            let settings = BundlePipelineSettings(
                bundleID: bundle.bundleID, defaultEnvironment: bundle.environment,
                transportKind: bundle.transport == .binary ? .binary : .http2,
                prefetch: UInt16(clamping: bundlePrefetch),
                retryPolicy: RetryPolicy(delays: configuration.retry.delays, maxAttempts: configuration.retry.maxAttempts),
                probeInterval: configuration.worker.probeInterval,
                shutdownDeadline: configuration.worker.shutdownDeadline, maxDeliveries: configuration.worker.maxDeliveries)
            pipelines.append(
                BundlePipeline(
                    settings: settings, broker: broker, transport: EnvironmentRouter(transports),
                    rollout: RolloutRule(bundle.rollout), statistics: statistics, logger: logger, observer: registry?.recorder,
                    tracing: tracing.map { PipelineTracing(tracer: $0.tracer, continuesProducerTrace: configuration.tracing?.parentBased ?? false) }))
        }
        services += try makeFeedbackPollers(configuration.bundles, broker: broker, logger: logger).map { poller in
            var poller = poller
            poller.observer = registry?.recorder
            return poller
        }
        let worker = WorkerService(broker: broker, topology: configuration.topologyPlan, pipelines: pipelines, logger: logger)
        let fleet = FleetService(
            broker: broker, worker: worker, identity: .current(version: APNSWorkerVersion.current),
            interval: configuration.admin.heartbeatInterval, logger: logger)
        // The admin server reads depths on one pooled connection and lists and moves dead and
        // retry jobs on connections of its own, never on the worker's. First in the group, so it
        // shuts down last and answers while the worker drains.
        let admin = try AdminService(
            settings: configuration.admin,
            worker: registry.map { registry in RegistryAwareStatus(base: worker, registryHeld: { registry.isHeld }) as any WorkerStatusProviding } ?? worker,
            queues: try QueueInspector(configuration: configuration, connectionName: "apns-worker admin", logger: logger, pooledReads: true),
            registry: metricsRegistry, logger: logger, registryStore: registry?.store, fleet: fleet,
            channels: try ConfiguredChannels(configuration: configuration, tokens: tokenSources))
        services.insert(admin, at: 0)
        // Right after the admin server: it shuts down after every service that makes spans, so
        // the last of them are exported.
        if let tracing {
            services.insert(tracing.service, at: 1)
            logger.info("tracing on", metadata: ["otel.endpoint": "\(configuration.tracing?.tracesURL ?? "-")"])
        }
        let configPath = configPath
        services.append(
            RolloutReloader(pipelines: pipelines, logger: logger) {
                let reloaded = try ConfigurationLoader.load(path: configPath, credentials: .skipFiles)
                return Dictionary(uniqueKeysWithValues: reloaded.bundles.map { ($0.bundleID, RolloutRule($0.rollout)) })
            })
        // The PostgreSQL pool before the registry service, so it shuts down after it (last flush).
        if let registry {
            services.append(registry.store.client)
            services.append(registry)
        }
        // Graceful shutdown runs in reverse order: the worker stops taking jobs and finishes
        // those in flight first, while the transports it sends through are still up.
        // Heartbeats go on while the worker drains: the fleet sees it until it exits.
        services.append(fleet)
        services.append(worker)
        let group = ServiceGroup(
            configuration: .init(
                services: services.map { .init(service: $0) },
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        logger.info("apns-worker starting", metadata: ["apns.bundles": "\(configuration.bundles.map(\.bundleID))"])
        logger.info("in-flight budget", metadata: [
            "amqp.maxInFlight": "\(budget.maxInFlight)", "amqp.prefetch": "\(configuration.amqp.prefetch)",
            "amqp.bundlePrefetch": "\(bundlePrefetch)", "amqp.bundleWindowCeiling": "\(bundleShare.ceiling)", "apns.bundleCount": "\(configuration.bundles.count)",
        ])
        if let warning = budget.floorWarning(bundles: configuration.bundles.count) {
            logger.warning("IN-FLIGHT BUDGET: \(warning)")
        }
        for warning in PeerSecurity.warnings(configuration) {
            logger.warning("INSECURE CONNECTION: \(warning)")
        }
        try await broker.whileConnected { try await group.run() }
    }

    /// - Parameter window: the bundle's share of `[amqp] maxInFlight`: where its in-flight window
    ///   starts (the consumer's first prefetch) and the most it grows to (issue 38).
    func makeTransport(
        _ bundle: BundleConfiguration, environment: APNSEnvironment, settings: WorkerSettings, tokens: TokenSources,
        window: InFlightBudget.Share, logger: Logger
    ) throws -> any NotificationTransport & Service {
        var transportLogger = logger
        transportLogger[metadataKey: "apns.bundle"] = "\(bundle.bundleID)"
        if bundle.transport == .binary {
            return try makeBinaryTransport(bundle, environment: environment, settings: settings, logger: transportLogger)
        }
        let authentication: HTTP2TransportConfiguration.Authentication
        switch bundle.auth {
        case .token(let teamID, let keyID, let keyFile):
            authentication = .token(try tokens.source(teamID: teamID, keyID: keyID, keyFile: keyFile, maximumAge: settings.providerTokenRefresh))
        case .certificate(let certFile, let keyFile):
            authentication = .certificate(certFile: certFile, keyFile: keyFile)
        }
        let (host, port) = bundle.endpoint(for: environment)
        var configuration = HTTP2TransportConfiguration(
            environment: environment, authentication: authentication, host: host, port: port)
        if let caFile = bundle.caFile { configuration.trustRoots = .caFile(caFile) }
        configuration.connections = bundle.connections
        configuration.connectOnFirstUse = environment != bundle.environment
        configuration.requestTimeout = settings.requestTimeout
        configuration.connectTimeout = settings.connectTimeout
        configuration.inFlightFloor = window.perBundle
        configuration.inFlightCeiling = window.ceiling
        // Unless the operator fixed `connections`, the window may open as many as its ceiling
        // needs at our stream cap (Apple allows about 1,000 streams each), up to 16.
        if !bundle.connectionsSet {
            let streams = configuration.maxConcurrentStreamsPerConnection
            configuration.maxConnections = max(bundle.connections, min(16, (window.ceiling + streams - 1) / streams))
        }
        return try HTTP2Transport(configuration: configuration, logger: transportLogger)
    }

    /// The legacy binary provider API: certificate authentication only (the loader refuses a
    /// binary bundle with token keys; this guards against a configuration built another way).
    func makeBinaryTransport(
        _ bundle: BundleConfiguration, environment: APNSEnvironment, settings: WorkerSettings, logger: Logger
    ) throws -> BinaryTransport {
        guard case .certificate(let certFile, let keyFile) = bundle.auth else {
            throw ValidationError("[apns \"\(bundle.bundleID)\"] transport = binary needs certFile and keyFile")
        }
        let (host, port) = bundle.endpoint(for: environment)
        var configuration = BinaryTransportConfiguration(
            environment: environment, certFile: certFile, keyFile: keyFile, host: host, port: port)
        if let caFile = bundle.caFile { configuration.trustRoots = .caFile(caFile) }
        configuration.connections = bundle.connections
        configuration.connectOnFirstUse = environment != bundle.environment
        configuration.holdWindow = bundle.binaryHoldWindow
        configuration.connectTimeout = settings.connectTimeout
        configuration.maxQueueWait = settings.requestTimeout
        return try BinaryTransport(configuration: configuration, logger: logger)
    }
}

extension RunCommand {
    /// A legacy feedback service poller per binary bundle that polls (`feedbackInterval` > 0),
    /// against the bundle's default environment, with the bundle's certificate.
    func makeFeedbackPollers(_ bundles: [BundleConfiguration], broker: AMQPConnection, logger: Logger) throws -> [FeedbackPoller<AMQPConnection>] {
        try bundles.compactMap { bundle in
            guard let (host, port) = bundle.feedbackEndpoint(for: bundle.environment),
                case .certificate(let certFile, let keyFile) = bundle.auth
            else { return nil }
            let client = try BinaryFeedbackClient(
                configuration: .init(host: host, port: port, certFile: certFile, keyFile: keyFile, caFile: bundle.caFile),
                logger: logger)
            return FeedbackPoller(
                bundleID: bundle.bundleID, interval: bundle.feedbackInterval, client: client, broker: broker, logger: logger)
        }
    }
}

/// One provider-token source per team key, shared by every transport that signs with it, so
/// there is one JWT per key (contract §4: TooManyProviderTokenUpdates must never happen).
final class TokenSources {
    private var sources: [String: ProviderTokenSource] = [:]

    func source(teamID: String, keyID: String, keyFile: String, maximumAge: Duration) throws -> ProviderTokenSource {
        let id = "\(teamID)/\(keyID)"
        if let existing = sources[id] { return existing }
        let pem = try String(contentsOfFile: keyFile, encoding: .utf8)
        let source = ProviderTokenSource(
            teamID: teamID, keyID: keyID, key: try .init(pemRepresentation: pem), maximumAge: maximumAge)
        sources[id] = source
        return source
    }
}

extension RolloutRule {
    /// The configuration's rollout keys as the gate's rule.
    init(_ gate: RolloutGate) {
        self.init(
            allow: gate.allowSyncServers.isEmpty ? nil : Set(gate.allowSyncServers),
            deny: Set(gate.denySyncServers),
            percentage: gate.percentage,
            allowUnnamed: gate.allowSyncServers.isEmpty)
    }
}
