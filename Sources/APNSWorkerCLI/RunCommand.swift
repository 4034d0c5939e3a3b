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
import Synchronization
import UnixSignals

/// `apns-worker run`: the worker. Start more instances to scale; they share the queues.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Consume notification jobs and deliver them to APNs until SIGTERM or SIGINT.")

    @Option(name: .customLong("config"), help: "The configuration file.")
    var configPath: String = BrokerOptions.defaultConfigPath

    func run() async throws {
        let loaded = try loadConfigurationWithDigests(configPath)
        let configuration = loaded.configuration
        let logger = makeLogger("apns-worker")
        // Before anything creates a metric, so every one of them reaches /metrics.
        let prometheus = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(AdminMetrics.factory(prometheus: prometheus))
        var amqp = try AMQPConfiguration(urlStrings: configuration.amqp.urls, connectionName: "apns-worker run")
        amqp.heartbeat = configuration.amqp.heartbeat
        if let caFile = configuration.amqp.caFile { amqp.tls.caFile = caFile }
        // `[amqp] caFile` is restart-only: its certificates are read here, once, and every
        // connection of this process (the worker's, the admin's) trusts these bytes, whatever
        // becomes of the file (librabbitmq would read it again at every reconnect).
        if amqp.urls.contains(where: \.tls) {
            amqp.tls = try amqp.tls.readingCertificates { path in
                do {
                    return Array(try BoundedFile.read(path, limit: BoundedFile.credentialLimit))
                } catch {
                    FileHandle.standardError.write(Data("[amqp] caFile: the CA certificates \(path) \(error)\n".utf8))
                    throw ExitCode.failure
                }
            }
        }

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
        let statistics = WorkerStatistics()
        let tokenSources = TokenSources()
        // One connection pool per credential, environment and endpoint, shared by the bundles
        // whose keys are equal, opened on its first job; a bundle unit acquires its
        // pools when it starts and releases them when it stops (a change while running).
        // A pool's in-flight window starts at a bundle's share and may grow to the whole budget:
        // what bounds the total is each bundle's cap (`BundleInFlightBounds`, which follows the
        // bundles added and removed while running), and a window its consumers do not fill
        // does not grow.
        let transports = TransportPools(logger: logger) {
            [worker = configuration.worker, budget = configuration.amqp.inFlightBudget, startCount = configuration.bundles.count] key, bundle, environment in
            try PoolTransports.make(
                bundle, environment: environment, key: key, settings: worker, tokens: tokenSources,
                windowFloor: budget.share(bundles: startCount).perBundle, windowCeiling: budget.maxInFlight, logger: logger)
        }
        services.append(transports)
        let pipelineTracing = tracing.map { PipelineTracing(tracer: $0.tracer, continuesProducerTrace: configuration.tracing?.parentBased ?? false) }
        let observer: (any JobEndObserver)? = registry?.recorder
        // A bundle's pipeline over its unit's transports, at start-up and for every bundle a
        // change while running adds or rebuilds (`ConfigurationReloader`).
        let poolPrefetches = PoolPrefetches()
        // `[amqp] maxInFlight` shared evenly: RabbitMQ bounds each consumer only, so the
        // instance-wide bound is each bundle's consumer asking for its share; worked out again
        // for the running bundles when a change adds or removes some.
        let inFlightBounds: WorkerService<AMQPConnection>.BoundsMaker = { bundle, configuration in
            let budget = configuration.amqp.inFlightBudget
            let share = budget.share(bundles: configuration.bundles.count)
            // Bundles sharing a pool split its streams, so no job waits for one past its deadline.
            let poolPrefetch = poolPrefetches.prefetch(of: bundle, in: configuration, share: share.perBundle, logger: logger)
            return budget.bounds(start: poolPrefetch, share: share)
        }
        let makePipeline: WorkerService<AMQPConnection>.PipelineMaker = { bundle, configuration, transport in
            let bounds = inFlightBounds(bundle, configuration)
            var settings = BundlePipelineSettings(
                bundleID: bundle.bundleID, defaultEnvironment: bundle.environment,
                transportKind: bundle.transport == .binary ? .binary : .http2,
                prefetch: UInt16(clamping: bounds.floor),
                retryPolicy: RetryPolicy(delays: configuration.retry.delays, maxAttempts: configuration.retry.maxAttempts),
                probeInterval: configuration.worker.probeInterval,
                shutdownDeadline: configuration.worker.shutdownDeadline, maxDeliveries: configuration.worker.maxDeliveries)
            settings.inFlightCeiling = bounds.ceiling
            settings.events = bundle.events
            return BundlePipeline(
                settings: settings, broker: broker, transport: transport, rollout: RolloutRule(bundle.rollout),
                statistics: statistics, logger: logger, observer: observer, tracing: pipelineTracing)
        }
        let budget = configuration.amqp.inFlightBudget
        let bundleShare = budget.share(bundles: configuration.bundles.count)
        let bundlePrefetch = bundleShare.perBundle
        // The binary bundles' feedback service pollers, following changes while running.
        let feedbackPollers = try FeedbackPollers(loaded, broker: broker, observer: registry?.recorder, logger: logger)
        services.append(feedbackPollers)
        let worker = try WorkerService(
            broker: broker, configuration: configuration, source: transports, logger: logger, inFlightBounds: inFlightBounds,
            makePipeline: makePipeline)
        let fleet = FleetService(
            broker: broker, worker: worker, identity: .current(version: APNSWorkerVersion.current),
            interval: configuration.admin.heartbeatInterval, logger: logger)
        let channels = try ConfiguredChannels(configuration: configuration, tokens: tokenSources, logger: logger)
        // The admin server reads depths on one pooled connection and lists and moves dead and
        // retry jobs on connections of its own, never on the worker's. First in the group, so it
        // shuts down last and answers while the worker drains.
        let admin = try AdminService(
            settings: configuration.admin,
            worker: registry.map { registry in RegistryAwareStatus(base: worker, registryHeld: { registry.isHeld }) as any WorkerStatusProviding } ?? worker,
            queues: QueueInspector(
                amqp: amqp.named("apns-worker admin"), bundleIDs: configuration.bundles.map(\.bundleID),
                retryDelays: configuration.retry.delays, logger: logger, pooledReads: true, registryQueues: configuration.registry != nil),
            prometheus: prometheus, logger: logger, registry: registry?.store, fleet: fleet,
            channels: channels)
        services.insert(admin, at: 0)
        // Right after the admin server: it shuts down after every service that makes spans, so
        // the last of them are exported.
        if let tracing {
            services.insert(tracing.service, at: 1)
            logger.info("tracing on", metadata: ["otel.endpoint": "\(configuration.tracing?.tracesURL ?? "-")"])
        }
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
        // Last, so it stops first: no change is applied while the worker drains.
        services.append(ConfigurationReloader(
            path: configPath, inForce: loaded, worker: worker, followers: [feedbackPollers, channels], logger: logger))
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
}

/// `loadConfiguration` with the digests of the files it names: the configuration in force at
/// start-up, which a change while running is compared with (`ConfigurationReloader`).
func loadConfigurationWithDigests(_ path: String) throws -> LoadedConfiguration {
    do {
        return try LoadedConfiguration.read(path: path)
    } catch {
        FileHandle.standardError.write(Data("\(error)\n".utf8))
        throw ExitCode.failure
    }
}
