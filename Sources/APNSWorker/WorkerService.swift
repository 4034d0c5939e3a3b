import AMQPClient
import APNSConfig
import APNSModel
import APNSTopology
import Logging
import ServiceLifecycle
import Synchronization

/// What the worker service uses of its broker: the pipelines' consume, get, settle and
/// publish, the topology's declaration and the pause markers' passive declares, and the
/// connection's state for readiness.
public typealias WorkerBroker = MessageBroker & TopologyDeclaring & BrokerConnectionStatus

/// `apns-worker run` as a ServiceLifecycle service: declares the topology of contract §1, then
/// runs one `BundleUnit` (a `BundlePipeline` and its transports) per configured bundle until
/// graceful shutdown. Units start and stop while it runs (`apply(_:configuration:)`, contract
/// §3 "Changes while running"), each a child of `run()`'s task group. Any number of instances
/// may run against the same broker: they are competing consumers of the same queues.
public final class WorkerService<Broker: WorkerBroker>: Service, Sendable {
    /// Builds a bundle's pipeline over the transport its unit acquired (the configuration gives
    /// the `[retry]`, `[worker]` and `[amqp]` settings in force).
    public typealias PipelineMaker = @Sendable (BundleConfiguration, WorkerConfiguration, any NotificationTransport) -> BundlePipeline<Broker>
    /// A bundle's in-flight bounds under a configuration (its share of `[amqp] maxInFlight`).
    public typealias BoundsMaker = @Sendable (BundleConfiguration, WorkerConfiguration) -> BundleInFlightBounds

    let broker: Broker
    let topology: TopologyPlan
    let logger: Logger
    let source: (any TransportSource)?
    let makePipeline: PipelineMaker?
    let inFlightBounds: BoundsMaker?
    private let state: Mutex<UnitState>
    private let inForce = Mutex<ConfigurationInForce?>(nil)
    private let starts: AsyncStream<BundleUnit<Broker>>
    private let startsContinuation: AsyncStream<BundleUnit<Broker>>.Continuation

    private struct UnitState {
        /// In configuration order.
        var units: [BundleUnit<Broker>] = []
        /// False once `run()` ended: a unit made later is abandoned, never run.
        var accepting = true
        /// The start-up declaration of the topology went through (`/ready` waits for it).
        var topologyDeclared = false
    }

    /// A worker over pipelines the caller made, with transports the caller runs; its units cannot
    /// be replaced at run time (tests, benchmarks).
    public init(broker: Broker, topology: TopologyPlan, pipelines: [BundlePipeline<Broker>], logger: Logger) {
        self.broker = broker
        self.topology = topology
        self.logger = logger
        self.source = nil
        self.makePipeline = nil
        self.inFlightBounds = nil
        let (stream, continuation) = AsyncStream.makeStream(of: BundleUnit<Broker>.self)
        starts = stream
        startsContinuation = continuation
        let units = pipelines.map { pipeline in
            BundleUnit(bundle: nil, pipeline: pipeline, source: nil, environments: [])
        }
        state = Mutex(UnitState(units: units))
        for unit in units { startsContinuation.yield(unit) }
    }

    /// A worker for `configuration`'s bundles, each unit's transports acquired from `source`.
    /// - Parameter inFlightBounds: each bundle's share of the budget under a configuration; a
    ///   change while running gives the units that keep running their new share (nil: none).
    /// - Throws: when a bundle's transports cannot be made (its TLS material does not load).
    public init(
        broker: Broker, configuration: WorkerConfiguration, source: any TransportSource, logger: Logger,
        inFlightBounds: BoundsMaker? = nil, makePipeline: @escaping PipelineMaker
    ) throws {
        self.broker = broker
        self.topology = configuration.topologyPlan
        self.logger = logger
        self.source = source
        self.makePipeline = makePipeline
        self.inFlightBounds = inFlightBounds
        let (stream, continuation) = AsyncStream.makeStream(of: BundleUnit<Broker>.self)
        starts = stream
        startsContinuation = continuation
        state = Mutex(UnitState())
        for bundle in configuration.bundles {
            let unit = try makeUnit(bundle, configuration: configuration)
            state.withLock { $0.units.append(unit) }
            startsContinuation.yield(unit)
        }
    }

    /// The configuration in force, for the admin surface (`ConfigurationReloader` keeps it).
    public var configurationInForce: ConfigurationInForce? {
        get { inForce.withLock { $0 } }
        set { inForce.withLock { $0 = newValue } }
    }

    /// Whether `run()` has declared the topology (the worker is not ready before).
    var isTopologyDeclared: Bool { state.withLock { $0.topologyDeclared } }

    /// The running bundles' pipelines, in configuration order.
    public var pipelines: [BundlePipeline<Broker>] {
        state.withLock { $0.units.map(\.pipeline) }
    }

    /// Bundles a provider fault holds right now (for `/ready` and the admin page).
    public var heldBundles: [String] {
        pipelines.filter(\.isHeld).map(\.settings.bundleID)
    }

    public func run() async throws {
        try await broker.declareWaitingForTheBroker(topology, logger: logger)
        logger.info("topology declared", metadata: ["amqp.queues": "\(topology.queues.count)", "apns.bundles": "\(pipelines.count)"])
        state.withLock { $0.topologyDeclared = true }
        try await applyStoredPauses()
        try await withThrowingDiscardingTaskGroup { group in
            for await unit in starts.cancelOnGracefulShutdown() {
                group.addTask { [logger, startsContinuation] in
                    do {
                        try await unit.run()
                    } catch {
                        // A pipeline rides broker outages out by itself; one that ends with an
                        // error anyway must not vanish while the process lives on without its
                        // consumer: no more units start, the others stop (the group cancels
                        // them) and the error ends the worker, loudly, for its supervisor.
                        logger.critical(
                            "a bundle's pipeline ended with an error: the worker stops", metadata: ["apns.bundle": "\(unit.bundleID)", "error": "\(error)"])
                        startsContinuation.finish()
                        throw error
                    }
                }
            }
        }
        let unstarted = state.withLock { state in
            state.accepting = false
            return state.units.filter { !$0.hasStarted }
        }
        for unit in unstarted { unit.abandon() }
        // Acks sent just before a channel closes can be overtaken by the close on quorum
        // queues (contract §4); give the last ones a moment to settle before the connection
        // (the service before this one in the group) closes.
        try? await Task.sleep(for: .milliseconds(500))
        logger.info("worker stopped")
    }

    /// Reads every bundle's pause marker before any pipeline consumes, so an instance started
    /// while a bundle is paused fleet-wide never takes its jobs (the fleet service keeps them in
    /// step afterwards).
    func applyStoredPauses() async throws {
        for pipeline in pipelines { try await applyStoredPause(pipeline) }
    }

    private func applyStoredPause(_ pipeline: BundlePipeline<Broker>) async throws {
        try await FleetControl.followMarker(of: pipeline.settings.bundleID, on: broker, logger: logger) { pipeline.setPaused($0) }
    }

    // MARK: - Changes while running

    /// Applies a configuration change while running (contract §3): declares the topology of a
    /// new bundle or retry delay first; stops the units of removed bundles and of bundles whose
    /// connections must be replaced (their jobs in flight end and settle, the rest wait in the
    /// broker); gives the rollout and retry changes to the running pipelines; then starts the
    /// new units, on new transports. Returns the bundles whose new unit could not be made, with
    /// why (they are not running).
    /// - Throws: when the topology cannot be declared; nothing was changed then.
    public func apply(_ change: ConfigurationChange, configuration: WorkerConfiguration) async throws -> [String: any Error] {
        guard source != nil, makePipeline != nil else {
            preconditionFailure("a worker built over fixed pipelines cannot apply configuration changes")
        }
        if !change.added.isEmpty || change.retryChanged {
            try await broker.declare(configuration.topologyPlan)
        }
        let leaving = Set(change.removed + change.reconnected.map(\.bundleID))
        let stopping = state.withLock { $0.units.filter { leaving.contains($0.bundleID) } }
        await withTaskGroup(of: Void.self) { group in
            for unit in stopping { group.addTask { await unit.stop() } }
        }
        state.withLock { $0.units.removeAll { leaving.contains($0.bundleID) } }

        let running = state.withLock { $0.units }
        for update in change.updated {
            running.first { $0.bundleID == update.bundleID }?.pipeline.updateRollout(RolloutRule(update.new.rollout))
            running.first { $0.bundleID == update.bundleID }?.pipeline.updateEvents(update.new.events)
        }
        if change.retryChanged {
            let policy = RetryPolicy(delays: configuration.retry.delays, maxAttempts: configuration.retry.maxAttempts)
            for unit in running { unit.pipeline.updateRetryPolicy(policy) }
        }
        // The budget is shared by the bundles configured now: those that keep running take
        // their new share before the new ones start, so the total stays within it.
        if let inFlightBounds {
            let bundles = Dictionary(configuration.bundles.map { ($0.bundleID, $0) }, uniquingKeysWith: { first, _ in first })
            for unit in running {
                guard let bundle = bundles[unit.bundleID] else { continue }
                unit.pipeline.updateInFlightBounds(inFlightBounds(bundle, configuration))
            }
        }

        var failures: [String: any Error] = [:]
        let entering = Set(change.added.map(\.bundleID) + change.reconnected.map(\.bundleID))
        for bundle in configuration.bundles where entering.contains(bundle.bundleID) {
            let unit: BundleUnit<Broker>
            do {
                unit = try makeUnit(bundle, configuration: configuration)
            } catch {
                failures[bundle.bundleID] = error
                continue
            }
            do {
                try await applyStoredPause(unit.pipeline)
            } catch {
                unit.abandon()
                failures[bundle.bundleID] = error
                continue
            }
            let accepted = state.withLock { state -> Bool in
                guard state.accepting else { return false }
                state.units.append(unit)
                return true
            }
            guard accepted, case .enqueued = startsContinuation.yield(unit) else {
                unit.abandon()
                continue
            }
        }
        let order = Dictionary(configuration.bundles.enumerated().map { ($1.bundleID, $0) }, uniquingKeysWith: { first, _ in first })
        state.withLock { $0.units.sort { (order[$0.bundleID] ?? .max) < (order[$1.bundleID] ?? .max) } }
        return failures
    }

    /// A unit for `bundle`: a transport per environment from the source (released again if
    /// one of them cannot be made), and the pipeline over them.
    private func makeUnit(_ bundle: BundleConfiguration, configuration: WorkerConfiguration) throws -> BundleUnit<Broker> {
        guard let source, let makePipeline else { preconditionFailure("no transport source") }
        var transports: [APNSEnvironment: any NotificationTransport] = [:]
        do {
            for environment in APNSEnvironment.allCases {
                transports[environment] = try source.acquire(bundle: bundle, environment: environment)
            }
        } catch {
            for environment in transports.keys { source.release(bundle: bundle, environment: environment) }
            throw error
        }
        let pipeline = makePipeline(bundle, configuration, PerEnvironmentTransport(transports, keyScope: bundle.keyScope))
        return BundleUnit(bundle: bundle, pipeline: pipeline, source: source, environments: APNSEnvironment.allCases)
    }
}

extension RolloutRule {
    /// The configuration's rollout keys as the gate's rule.
    public init(_ gate: RolloutGate) {
        self.init(
            allow: gate.allowSyncServers.isEmpty ? nil : Set(gate.allowSyncServers),
            deny: Set(gate.denySyncServers),
            percentage: gate.percentage,
            allowUnnamed: gate.allowSyncServers.isEmpty)
    }
}
