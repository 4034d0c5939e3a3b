import AMQPClient
import APNSConfig
import APNSModel
import APNSRegistryMessages
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import QueueConsumer
import ServiceClock
import ServiceLifecycle

/// How the registry service consumes and fans out (`RegistryService.Settings`).
public struct RegistryServiceSettings: Sendable {
    public var registrationPrefetch: UInt16 = 64
    public var groupPrefetch: UInt16 = 4
    /// Devices read and published per page of a fan-out.
    public var fanOutBatchSize = 500
    public var probeInterval: Duration = .seconds(5)
    /// On graceful shutdown, how long messages in flight may take to finish (`[worker] shutdownDeadline`).
    public var shutdownDeadline: Duration = .seconds(30)
    /// The time of the consumers' holds and probes and of the trailing pushes' breaker.
    public var clock: any ConsumerClock = SystemConsumerClock()
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
/// `countsFlushInterval`. The two consumers are `QueueConsumer`s, each with its own hold
/// breaker; a registry failure in one holds the other along with it.
public final class RegistryService<Broker: RegistryBroker>: Service, Sendable {
    public typealias Settings = RegistryServiceSettings

    public let store: RegistryStore
    public let recorder: RegistryRecorder
    typealias Consumer = QueueConsumer<RegistryConsumer<Broker>>
    let registrations: Consumer
    let groups: Consumer
    let broker: Broker
    let settings: Settings
    let logger: Logger

    public init(store: RegistryStore, broker: Broker, flushInterval: Duration, settings: Settings = .init(), logger: Logger) {
        self.store = store
        self.broker = broker
        self.settings = settings
        var logger = logger
        logger[metadataKey: "component"] = "registry"
        self.logger = logger
        let announcer = logger
        registrations = Consumer(
            limit: Int(settings.registrationPrefetch), probeInterval: settings.probeInterval, shutdownDeadline: settings.shutdownDeadline,
            clock: settings.clock, announce: { RegistryConsumer<Broker>.announce($0, queue: TopologyNames.registry, logger: announcer) })
        groups = Consumer(
            limit: Int(settings.groupPrefetch), probeInterval: settings.probeInterval, shutdownDeadline: settings.shutdownDeadline,
            clock: settings.clock, announce: { RegistryConsumer<Broker>.announce($0, queue: TopologyNames.groups, logger: announcer) })
        self.recorder = RegistryRecorder(store: store, flushInterval: flushInterval, logger: logger, clock: settings.clock)
    }

    /// Whether the registry consumers are held because PostgreSQL is unavailable (`/ready`).
    public var isHeld: Bool { registrations.isHeld || groups.isHeld }

    /// Runs until graceful shutdown. The pool (`store.client`) is a service of its own, placed
    /// before this one in the group so that it shuts down after it: the last flush and the
    /// messages in flight still reach PostgreSQL.
    public func run() async throws {
        var plan = TopologyPlan(bundleIDs: [], retryDelays: [], queueType: settings.queueType)
        plan.addRegistry(queueType: settings.queueType)
        try await broker.declareWaitingForTheBroker(plan, logger: logger)
        let applied = try await store.migrate()
        logger.info("registry schema ready", metadata: ["registry.schema": "\(RegistrySchema.latestVersion)", "registry.applied": "\(applied)"])
        let registrationWork = RegistryConsumer(
            queue: TopologyNames.registry, deadQueue: TopologyNames.registryDead, prefetch: settings.registrationPrefetch,
            maxBodySize: RegistrationMessage.maxBodyBytes, broker: broker, store: store, logger: logger, clock: settings.clock,
            sibling: groups, handle: RegistrationHandler(store: store, logger: logger).handle)
        let groupWork = RegistryConsumer(
            queue: TopologyNames.groups, deadQueue: TopologyNames.groupsDead, prefetch: settings.groupPrefetch,
            maxBodySize: JobParser.Limits().maxBodyBytes, broker: broker, store: store, logger: logger, clock: settings.clock,
            sibling: registrations,
            handle: GroupFanOut(
                store: store, broker: broker, recorder: recorder, batchSize: settings.fanOutBatchSize,
                window: SyncWindow(length: settings.syncWindow), logger: logger, tracing: settings.tracing
            ).handle)
        let trailing = TrailingPusher(
            store: store, broker: broker, recorder: recorder, window: SyncWindow(length: settings.syncWindow),
            batchSize: settings.fanOutBatchSize, leaseMS: SyncWindow(length: settings.trailingLease).lengthMS, logger: logger,
            clock: settings.clock)
        logger.info("registry consumers started", metadata: ["amqp.queues": "\(TopologyNames.registry), \(TopologyNames.groups)"])
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await self.registrations.run(registrationWork) }
            group.addTask { try await self.groups.run(groupWork) }
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
