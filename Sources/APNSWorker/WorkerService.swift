import AMQPClient
import APNSCore
import Logging
import ServiceLifecycle

/// `apns-worker run` as a ServiceLifecycle service: declares the topology of contract §1, then
/// runs one `BundlePipeline` per configured bundle until graceful shutdown. Any number of
/// instances may run against the same broker: they are competing consumers of the same queues.
public final class WorkerService: Service, Sendable {
    public let pipelines: [BundlePipeline<AMQPConnection>]
    let broker: AMQPConnection
    let topology: TopologyPlan
    let logger: Logger

    public init(broker: AMQPConnection, topology: TopologyPlan, pipelines: [BundlePipeline<AMQPConnection>], logger: Logger) {
        self.broker = broker
        self.topology = topology
        self.pipelines = pipelines
        self.logger = logger
    }

    /// Bundles a provider fault holds right now (for `/ready` and the admin page).
    public var heldBundles: [String] {
        pipelines.filter(\.isHeld).map(\.settings.bundleID)
    }

    public func run() async throws {
        try await broker.declare(topology)
        logger.info("topology declared", metadata: ["amqp.queues": "\(topology.queues.count)", "apns.bundles": "\(pipelines.count)"])
        try await withThrowingDiscardingTaskGroup { group in
            for pipeline in pipelines {
                group.addTask { try await pipeline.run() }
            }
        }
        // Acks sent just before a channel closes can be overtaken by the close on quorum
        // queues (contract §4); give the last ones a moment to settle before the caller closes.
        try? await Task.sleep(for: .milliseconds(500))
        logger.info("worker stopped")
    }
}
