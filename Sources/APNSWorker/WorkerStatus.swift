import AMQPClient
import APNSModel

/// A point-in-time view of a running worker for the admin surface (`/ready`, `/api/status`, the
/// HTML page and the sampled gauges): the broker connection, and per bundle whether it is held,
/// its job counts and rates, and its APNs connections by state.
public struct WorkerStatus: Sendable, Hashable, Codable {
    public struct Bundle: Sendable, Hashable, Codable {
        public var bundleID: String
        /// A provider fault holds the bundle: its consumer is paused and it only probes.
        public var held: Bool
        /// An operator paused it fleet-wide (contract §5): not a fault, so not in `heldBundles`.
        public var paused: Bool
        public var activity: WorkerStatistics.BundleActivity
        /// APNs connections by state (`TransportConnectionState` raw values, every state present);
        /// empty when the transport does not report them.
        public var connections: [String: Int]

        public init(
            bundleID: String, held: Bool, paused: Bool = false, activity: WorkerStatistics.BundleActivity, connections: [String: Int]
        ) {
            self.bundleID = bundleID
            self.held = held
            self.paused = paused
            self.activity = activity
            self.connections = connections
        }
    }

    /// A connection pool to APNs, shared by the bundles of one credential (`TransportPools`).
    public struct Pool: Sendable, Hashable, Codable {
        /// `TransportPoolKey.description`: the credential (a digest's prefix), environment, endpoint.
        public var name: String
        public var environment: String
        /// The bundles using it, sorted.
        public var bundles: [String]
        /// Its connections by state (`TransportConnectionState` raw values, every state present):
        /// `idle` while no job has needed it, which is not a fault.
        public var connections: [String: Int]

        public init(name: String, environment: String, bundles: [String], connections: [String: Int]) {
            self.name = name
            self.environment = environment
            self.bundles = bundles
            self.connections = connections
        }
    }

    /// The worker's broker connection (`AMQPConnectionState` raw value: connected, connecting, …).
    public var broker: String
    public var bundles: [Bundle]
    /// The connection pools, by name; empty when the worker's transports are not pooled.
    public var pools: [Pool] = []
    /// The device registry (contract §6): `ok`, `held` (PostgreSQL unavailable), or nil when none is configured.
    public var registry: String? = nil
    /// The configuration in force (contract §3, changes while running), when the worker knows it.
    public var configuration: ConfigurationInForce? = nil
    /// Whether the worker has declared its topology since it started: until then a job published
    /// for one of its bundles may find no queue on a new broker (it would go to `apns.unrouted`),
    /// so the worker is not ready however well connected it is.
    public var topologyDeclared = true

    public init(broker: String, bundles: [Bundle]) {
        self.broker = broker
        self.bundles = bundles
    }

    public var brokerConnected: Bool { broker == AMQPConnectionState.connected.rawValue }
    public var heldBundles: [String] { bundles.filter(\.held).map(\.bundleID) }
    /// Ready to take jobs: the topology declared, connected to the broker, no bundle held, the
    /// registry (if any) not held (`/ready`).
    public var isReady: Bool { topologyDeclared && brokerConnected && heldBundles.isEmpty && registry != "held" }
}

/// Whatever can describe a running worker; `WorkerService` in production.
public protocol WorkerStatusProviding: Sendable {
    func status() -> WorkerStatus
}

extension WorkerService: WorkerStatusProviding {
    public func status() -> WorkerStatus {
        var status = WorkerStatus(
            broker: broker.state.rawValue,
            bundles: pipelines.map { pipeline in
                // A pooled bundle's connections are its pool's, shared: reported once per pool
                // (`pools`), never once per bundle that uses it.
                let connections = source is TransportPools ? [:] : pipeline.connectionStates() ?? [:]
                return WorkerStatus.Bundle(
                    bundleID: pipeline.settings.bundleID, held: pipeline.isHeld, paused: pipeline.isPaused,
                    activity: pipeline.statistics.activity(bundle: pipeline.settings.bundleID),
                    connections: Dictionary(uniqueKeysWithValues: connections.map { ($0.key.rawValue, $0.value) }))
            })
        status.configuration = configurationInForce
        status.topologyDeclared = isTopologyDeclared
        status.pools = (source as? TransportPools)?.reports() ?? []
        return status
    }
}

/// A worker's status with the registry's state added (`/ready` answers 503 naming it while held).
public struct RegistryAwareStatus: WorkerStatusProviding {
    let base: any WorkerStatusProviding
    let registryHeld: @Sendable () -> Bool

    public init(base: any WorkerStatusProviding, registryHeld: @escaping @Sendable () -> Bool) {
        self.base = base
        self.registryHeld = registryHeld
    }

    public func status() -> WorkerStatus {
        var status = base.status()
        status.registry = registryHeld() ? "held" : "ok"
        return status
    }
}
