/// APNSTopology: the broker topology of contract §1 (and §6 with a registry) as an `AMQPClient`
/// plan: which exchanges, queues and bindings the worker declares, with which arguments. Pure
/// values; `AMQPConnection.declare` carries them out. It sits above the client, so the client
/// stays a general AMQP client and the core holds no AMQP argument vocabulary. The headers of a
/// job's messages are read and written here too, by `JobEnvelope`.
import AMQPClient
import APNSConfig
import APNSModel
import APNSTopologyNames

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
            ExchangeDeclaration(name: TopologyNames.eventsExchange, kind: .topic),
        ]
        var queues = [
            Self.queue(TopologyNames.unrouted, Self.typeArguments(queueType)),
            Self.queue(TopologyNames.feedbackUnrouted, Self.typeArguments(queueType)),
        ]
        var bindings = [
            BindingDeclaration(queue: TopologyNames.unrouted, exchange: TopologyNames.unrouted, routingKey: ""),
            BindingDeclaration(queue: TopologyNames.feedbackUnrouted, exchange: TopologyNames.feedbackUnrouted, routingKey: ""),
        ]
        var distinctDelays: [Duration] = []
        for d in retryDelays where !distinctDelays.contains(d) { distinctDelays.append(d) }
        for bundle in bundleIDs {
            let work = TopologyNames.workQueue(bundle)
            queues.append(Self.consumedQueue(work, deadQueue: TopologyNames.deadQueue(bundle), queueType))
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
                queues.append(Self.queue(TopologyNames.retryQueue(bundle, delay: delay), args))
            }
            queues.append(Self.queue(TopologyNames.deadQueue(bundle), Self.typeArguments(queueType)))
        }
        self.init(exchanges: exchanges, queues: queues, bindings: bindings)
    }

    private static func typeArguments(_ type: QueueType) -> [String: TopologyArgument] {
        var arguments: [String: TopologyArgument] = ["x-queue-type": .string(type.rawValue)]
        if type == .quorum { arguments[Self.deliveryLimitArgument] = .int(Self.unlimitedDeliveries) }
        return arguments
    }

    /// A quorum queue's own poison-message limit. RabbitMQ 4 drops a message delivered 20 times
    /// unless told otherwise, and every listing and registry-hold nack counts as a delivery; no
    /// queue of ours wants that (the worker dead-letters poison jobs itself, with a reason:
    /// `[worker] maxDeliveries`). "Unlimited" is -1 on RabbitMQ 4, but RabbitMQ 3.10 accepts -1
    /// and drops a message at its first return; 2^31−1 means "never" on both (docs/decisions.md).
    public static let deliveryLimitArgument = "x-delivery-limit"
    public static let unlimitedDeliveries = Int64(Int32.max)

    /// A queue declared the way every quorum queue of ours is: the limit is lenient, so a queue
    /// declared by a version before the limit still starts (`QueueDeclaration.lenientArguments`).
    static func queue(_ name: String, _ arguments: [String: TopologyArgument]) -> QueueDeclaration {
        var declaration = QueueDeclaration(name: name, arguments: arguments)
        if arguments[deliveryLimitArgument] != nil { declaration.lenientArguments = [deliveryLimitArgument] }
        return declaration
    }

    /// A queue the worker consumes, dead-lettering into `deadQueue`: the worker rejects (without
    /// requeue) only a message over its size limit, whose body it never kept, so the broker moves
    /// it there unchanged (docs/decisions.md, "Oversized messages"). On a quorum queue the move is
    /// at-least-once (kept in the source until the dead queue confirmed it), which RabbitMQ allows
    /// only with `x-overflow = reject-publish`. The arguments are lenient: a queue declared by an
    /// earlier version starts as it is, with one warning; a policy gives it the same settings.
    static func consumedQueue(_ name: String, deadQueue: String, _ type: QueueType) -> QueueDeclaration {
        var arguments = typeArguments(type)
        arguments[deadLetterExchangeArgument] = .string("")
        arguments[deadLetterRoutingKeyArgument] = .string(deadQueue)
        if type == .quorum {
            arguments[deadLetterStrategyArgument] = .string("at-least-once")
            arguments[overflowArgument] = .string("reject-publish")
        }
        var declaration = queue(name, arguments)
        declaration.lenientArguments.formUnion([
            deadLetterExchangeArgument, deadLetterRoutingKeyArgument, deadLetterStrategyArgument, overflowArgument,
        ])
        return declaration
    }

    public static let deadLetterExchangeArgument = "x-dead-letter-exchange"
    public static let deadLetterRoutingKeyArgument = "x-dead-letter-routing-key"
    public static let deadLetterStrategyArgument = "x-dead-letter-strategy"
    public static let overflowArgument = "x-overflow"

    /// Adds §6's exchanges, queues and bindings (the two work queues of the configured type).
    public mutating func addRegistry(queueType: QueueType) {
        let type = Self.typeArguments(queueType)
        for (name, dead) in [(TopologyNames.registry, TopologyNames.registryDead), (TopologyNames.groups, TopologyNames.groupsDead)] {
            exchanges.append(ExchangeDeclaration(name: name, kind: .fanout))
            queues.append(Self.consumedQueue(name, deadQueue: dead, queueType))
            bindings.append(BindingDeclaration(queue: name, exchange: name, routingKey: ""))
        }
        queues.append(Self.queue(TopologyNames.registryDead, type))
        queues.append(Self.queue(TopologyNames.groupsDead, type))
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
