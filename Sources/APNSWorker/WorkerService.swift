import AMQPClient
import APNSModel
import Logging
import ServiceLifecycle

/// What the worker service uses of its broker: the pipelines' consume, get, settle and
/// publish, the topology's declaration and the pause markers' passive declares, and the
/// connection's state for readiness.
public typealias WorkerBroker = MessageBroker & TopologyDeclaring & BrokerConnectionStatus

/// `apns-worker run` as a ServiceLifecycle service: declares the topology of contract §1, then
/// runs one `BundlePipeline` per configured bundle until graceful shutdown. Any number of
/// instances may run against the same broker: they are competing consumers of the same queues.
public final class WorkerService<Broker: WorkerBroker>: Service, Sendable {
    public let pipelines: [BundlePipeline<Broker>]
    let broker: Broker
    let topology: TopologyPlan
    let logger: Logger
    /// The connection pools the pipelines send through, for the status; nil when they are not pooled.
    let transports: TransportRegistry?

    public init(
        broker: Broker, topology: TopologyPlan, pipelines: [BundlePipeline<Broker>], logger: Logger, transports: TransportRegistry? = nil
    ) {
        self.broker = broker
        self.topology = topology
        self.pipelines = pipelines
        self.logger = logger
        self.transports = transports
    }

    /// Bundles a provider fault holds right now (for `/ready` and the admin page).
    public var heldBundles: [String] {
        pipelines.filter(\.isHeld).map(\.settings.bundleID)
    }

    public func run() async throws {
        try await broker.declare(topology)
        logger.info("topology declared", metadata: ["amqp.queues": "\(topology.queues.count)", "apns.bundles": "\(pipelines.count)"])
        try await applyStoredPauses()
        try await withThrowingDiscardingTaskGroup { group in
            for pipeline in pipelines {
                group.addTask { try await pipeline.run() }
            }
        }
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
        for pipeline in pipelines where try await FleetControl.isPaused(pipeline.settings.bundleID, on: broker) {
            if pipeline.setPaused(true) {
                logger.notice("bundle PAUSED by an operator: its jobs wait in the broker", metadata: ["apns.bundle": "\(pipeline.settings.bundleID)"])
            }
        }
    }
}
