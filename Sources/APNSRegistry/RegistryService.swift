import AMQPClient
import APNSConfig
import APNSModel
import APNSRegistryMessages
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import ServiceLifecycle

/// How the registry service consumes and fans out (`RegistryService.Settings`).
public struct RegistryServiceSettings: Sendable {
    public var registrationPrefetch: UInt16 = 64
    public var groupPrefetch: UInt16 = 4
    /// Devices read and published per page of a fan-out.
    public var fanOutBatchSize = 500
    public var probeInterval: Duration = .seconds(5)
    /// The type of §6's queues (`[amqp] queueType`).
    public var queueType: QueueType = .quorum
    /// `[registry] syncWindow`.
    public var syncWindow: Duration = RegistrySettings.defaultSyncWindow
    /// How long a claimed trailing push stays claimed (the instance may have died).
    public var trailingLease: Duration = .seconds(10)
    /// `[tracing]`: group jobs' spans and the trace context of their fan-out; nil when off.
    public var tracing: GroupFanOutTracing? = nil
    public init(probeInterval: Duration = .seconds(5), queueType: QueueType = .quorum, syncWindow: Duration = RegistrySettings.defaultSyncWindow) {
        self.probeInterval = probeInterval
        self.queueType = queueType
        self.syncWindow = syncWindow
    }
}

/// What the registry service uses of its broker: §6's queues declared, consumed and settled,
/// dead letters and fan-out jobs published with confirms.
public typealias RegistryBroker = MessageConsuming & ConfirmedPublishing & TopologyDeclaring

/// The registry part of `apns-worker run` (contract §6) as one ServiceLifecycle service: the
/// PostgreSQL pool, the schema migrations at start, the `apns.registry` and `apns.groups`
/// consumers (held together while the registry is down), the trailing pushes of the sync window
/// (`TrailingPusher`), and the recorder that writes counts and invalid marks every
/// `countsFlushInterval`.
public final class RegistryService<Broker: RegistryBroker>: Service, Sendable {
    public typealias Settings = RegistryServiceSettings

    public let store: RegistryStore
    public let recorder: RegistryRecorder
    public let health: RegistryHealth
    let broker: Broker
    let settings: Settings
    let logger: Logger

    public init(store: RegistryStore, broker: Broker, flushInterval: Duration, settings: Settings = .init(), logger: Logger) {
        self.store = store
        self.broker = broker
        self.settings = settings
        self.health = RegistryHealth(probeInterval: settings.probeInterval)
        var logger = logger
        logger[metadataKey: "component"] = "registry"
        self.logger = logger
        self.recorder = RegistryRecorder(store: store, flushInterval: flushInterval, logger: logger)
    }

    /// Whether the registry consumers are held because PostgreSQL is unavailable (`/ready`).
    public var isHeld: Bool { health.isHeld }

    /// Runs until graceful shutdown. The pool (`store.client`) is a service of its own, placed
    /// before this one in the group so that it shuts down after it: the last flush and the
    /// messages in flight still reach PostgreSQL.
    public func run() async throws {
        var plan = TopologyPlan(bundleIDs: [], retryDelays: [], queueType: settings.queueType)
        plan.addRegistry(queueType: settings.queueType)
        try await broker.declare(plan)
        let applied = try await store.migrate()
        logger.info("registry schema ready", metadata: ["registry.schema": "\(RegistrySchema.latestVersion)", "registry.applied": "\(applied)"])
        let registrations = RegistryConsumer(
            queue: TopologyNames.registry, deadQueue: TopologyNames.registryDead, prefetch: settings.registrationPrefetch,
            maxBodySize: RegistrationMessage.maxBodyBytes,
            broker: broker, store: store, health: health, logger: logger,
            handle: RegistrationHandler(store: store, logger: logger).handle)
        let groups = RegistryConsumer(
            queue: TopologyNames.groups, deadQueue: TopologyNames.groupsDead, prefetch: settings.groupPrefetch,
            maxBodySize: JobParser.Limits().maxBodyBytes,
            broker: broker, store: store, health: health, logger: logger,
            handle: GroupFanOut(
                store: store, broker: broker, recorder: recorder, batchSize: settings.fanOutBatchSize,
                window: SyncWindow(length: settings.syncWindow), logger: logger, tracing: settings.tracing
            ).handle)
        let trailing = TrailingPusher(
            store: store, broker: broker, recorder: recorder, window: SyncWindow(length: settings.syncWindow),
            batchSize: settings.fanOutBatchSize, leaseMS: SyncWindow(length: settings.trailingLease).lengthMS, logger: logger)
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await registrations.run() }
            group.addTask { try await groups.run() }
            group.addTask { await trailing.run() }
            group.addTask { try await self.recorder.run() }
        }
    }
}

extension RegistryStore {
    /// Migrates with a pool of its own, before the worker starts: a database that cannot be
    /// reached, or refuses, is one line naming the file, line and key (password masked).
    public static func migrateAtStartUp(_ settings: RegistrySettings, logger: Logger) async throws(ConfigurationError) -> [Int] {
        do {
            try await RegistryStore.connectOnce(settings, logger: logger)
            let store = try RegistryStore(settings: settings, logger: logger)
            return try await withThrowingTaskGroup(of: [Int]?.self) { group in
                group.addTask {
                    await store.run()
                    return nil
                }
                defer { group.cancelAll() }
                return try await store.migrate()
            }
        } catch {
            var detail = String(String(reflecting: error).prefix(300))
            if let password = settings.url.password, !password.isEmpty { detail = detail.replacingOccurrences(of: password, with: "***") }
            throw ConfigurationError(
                .badValue, at: settings.urlLocation, section: "[registry]", key: "url",
                "cannot use PostgreSQL at \(settings.url.masked): \(detail)")
        }
    }
}
