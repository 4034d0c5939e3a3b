/// APNSTopology: the broker topology of contract §1 (and §6 with a registry) as an `AMQPClient`
/// plan: which exchanges, queues and bindings the worker declares, with which arguments. Pure
/// values; `AMQPConnection.declare` carries them out. It sits above the client, so the client
/// stays a general AMQP client and the core holds no AMQP argument vocabulary. The headers of a
/// job's messages are read and written here too, by `JobEnvelope`.
import AMQPClient
import APNSConfig
import APNSCore

extension TopologyPlan {
    /// The shared part (exchanges, unrouted queues) plus, for each bundle, its work queue, one
    /// retry queue per distinct delay, and its dead queue.
    public init(bundleIDs: [String], retryDelays: [Duration], queueType: QueueType) {
        let exchanges = [
            ExchangeDeclaration(name: TopologyNames.unrouted, kind: .fanout),
            ExchangeDeclaration(
                name: TopologyNames.jobsExchange, kind: .direct,
                arguments: ["alternate-exchange": .string(TopologyNames.unrouted)]),
            ExchangeDeclaration(name: TopologyNames.feedbackUnrouted, kind: .fanout),
            ExchangeDeclaration(
                name: TopologyNames.feedbackExchange, kind: .topic,
                arguments: ["alternate-exchange": .string(TopologyNames.feedbackUnrouted)]),
        ]
        var queues = [
            QueueDeclaration(name: TopologyNames.unrouted, arguments: Self.typeArguments(queueType)),
            QueueDeclaration(name: TopologyNames.feedbackUnrouted, arguments: Self.typeArguments(queueType)),
        ]
        var bindings = [
            BindingDeclaration(queue: TopologyNames.unrouted, exchange: TopologyNames.unrouted, routingKey: ""),
            BindingDeclaration(queue: TopologyNames.feedbackUnrouted, exchange: TopologyNames.feedbackUnrouted, routingKey: ""),
        ]
        var distinctDelays: [Duration] = []
        for d in retryDelays where !distinctDelays.contains(d) { distinctDelays.append(d) }
        for bundle in bundleIDs {
            let work = TopologyNames.workQueue(bundle)
            queues.append(QueueDeclaration(name: work, arguments: Self.typeArguments(queueType)))
            bindings.append(BindingDeclaration(queue: work, exchange: TopologyNames.jobsExchange, routingKey: bundle))
            for delay in distinctDelays {
                var args = Self.typeArguments(queueType)
                args["x-message-ttl"] = .int(delay.milliseconds)
                // Expired messages go straight back to the work queue through the default exchange.
                args["x-dead-letter-exchange"] = .string("")
                args["x-dead-letter-routing-key"] = .string(work)
                if queueType == .quorum {
                    // Quorum queues dead-letter at-most-once unless told otherwise; a retry must
                    // never vanish between the retry queue and the work queue.
                    args["x-dead-letter-strategy"] = .string("at-least-once")
                    args["x-overflow"] = .string("reject-publish")
                }
                queues.append(QueueDeclaration(name: TopologyNames.retryQueue(bundle, delay: delay), arguments: args))
            }
            queues.append(QueueDeclaration(name: TopologyNames.deadQueue(bundle), arguments: Self.typeArguments(queueType)))
        }
        self.init(exchanges: exchanges, queues: queues, bindings: bindings)
    }

    private static func typeArguments(_ type: QueueType) -> [String: TopologyArgument] {
        ["x-queue-type": .string(type.rawValue)]
    }

    /// Adds §6's exchanges, queues and bindings (the two work queues of the configured type).
    public mutating func addRegistry(queueType: QueueType) {
        let type: [String: TopologyArgument] = ["x-queue-type": .string(queueType.rawValue)]
        for name in [TopologyNames.registry, TopologyNames.groups] {
            exchanges.append(ExchangeDeclaration(name: name, kind: .fanout))
            queues.append(QueueDeclaration(name: name, arguments: type))
            bindings.append(BindingDeclaration(queue: name, exchange: name, routingKey: ""))
        }
        queues.append(QueueDeclaration(name: TopologyNames.registryDead, arguments: type))
        queues.append(QueueDeclaration(name: TopologyNames.groupsDead, arguments: type))
    }
}

extension WorkerConfiguration {
    /// The broker topology these settings ask for (contract §1, and §6 with `[registry]`).
    public var topologyPlan: TopologyPlan {
        var plan = TopologyPlan(bundleIDs: bundles.map(\.bundleID), retryDelays: retry.delays, queueType: amqp.queueType)
        if registry != nil { plan.addRegistry(queueType: amqp.queueType) }
        return plan
    }
}
