/// The broker topology of contract §1 as plain values: names and arguments, no IO.
/// `AMQPClient` declares a `TopologyPlan`; the worker, the CLI and the tests use the same names.
public enum QueueType: String, Sendable, Hashable, CaseIterable {
    case quorum
    case classic
}

/// The names the contract fixes, and the ones it leaves to us (retry queues).
public enum TopologyNames {
    /// Where the sync server publishes jobs; routing key = bundle ID.
    public static let jobsExchange = "apns.jobs"
    /// Alternate exchange and queue for jobs of bundle IDs no worker is configured for.
    public static let unrouted = "apns.unrouted"
    /// Topic exchange for invalid-token events; routing key = bundle ID.
    public static let feedbackExchange = "apns.feedback"
    /// Alternate exchange and queue for feedback events no queue is bound for, so an event is
    /// kept until the sync server binds its own queue instead of being dropped by the broker.
    public static let feedbackUnrouted = "apns.feedback.unrouted"

    public static func workQueue(_ bundleID: String) -> String { "apns.\(bundleID)" }
    public static func deadQueue(_ bundleID: String) -> String { "apns.\(bundleID).dead" }
    /// One retry queue per distinct delay, named by the delay so a queue's meaning is visible in
    /// the management UI: `apns.<bundle>.retry.10s`, `apns.<bundle>.retry.5m`.
    public static func retryQueue(_ bundleID: String, delay: Duration) -> String {
        "apns.\(bundleID).retry.\(delayLabel(delay))"
    }

    /// `90s` → `1m30s`, `3600s` → `1h`, `1500ms` → `1500ms`.
    public static func delayLabel(_ delay: Duration) -> String {
        let ms = delay.milliseconds
        if ms % 1000 != 0 { return "\(ms)ms" }
        var s = ms / 1000
        var out = ""
        if s >= 3600 { out += "\(s / 3600)h"; s %= 3600 }
        if s >= 60 { out += "\(s / 60)m"; s %= 60 }
        if s > 0 || out.isEmpty { out += "\(s)s" }
        return out
    }
}

/// Message headers the worker writes (contract §4), shared by the worker, the CLI and the tests.
public enum JobHeaders {
    /// Attempts made so far, on jobs in retry queues and requeued jobs.
    public static let attempt = "x-apns-attempt"
    public static let reason = "x-apns-reason"
    public static let status = "x-apns-status"
    public static let attempts = "x-apns-attempts"
    public static let failedAt = "x-apns-failed-at"
    public static let error = "x-apns-error"
    /// On a job requeued by an operator: the `x-apns-reason` it had when it was dead.
    public static let lastReason = "x-apns-last-reason"
    /// Written by RabbitMQ on a quorum queue's redeliveries: how many times it was delivered
    /// before. Never forwarded, so that a count always belongs to the delivery it came with.
    public static let deliveryCount = "x-delivery-count"
}

/// A value in an AMQP argument table, reduced to what topology needs.
public enum TopologyArgument: Sendable, Hashable {
    case string(String)
    case int(Int64)
}

public struct ExchangeDeclaration: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable { case direct, fanout, topic }
    public var name: String
    public var kind: Kind
    public var arguments: [String: TopologyArgument]
    public init(name: String, kind: Kind, arguments: [String: TopologyArgument] = [:]) {
        self.name = name
        self.kind = kind
        self.arguments = arguments
    }
}

public struct QueueDeclaration: Sendable, Hashable {
    public var name: String
    public var arguments: [String: TopologyArgument]
    public init(name: String, arguments: [String: TopologyArgument] = [:]) {
        self.name = name
        self.arguments = arguments
    }
}

public struct BindingDeclaration: Sendable, Hashable {
    public var queue: String
    public var exchange: String
    public var routingKey: String
    public init(queue: String, exchange: String, routingKey: String) {
        self.queue = queue
        self.exchange = exchange
        self.routingKey = routingKey
    }
}

/// Everything to declare, in an order that works on an empty broker: exchanges, queues, bindings.
/// All of it is durable; declaring it again with the same arguments is a no-op on the broker.
public struct TopologyPlan: Sendable, Hashable {
    public var exchanges: [ExchangeDeclaration]
    public var queues: [QueueDeclaration]
    public var bindings: [BindingDeclaration]

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
        self.exchanges = exchanges
        self.queues = queues
        self.bindings = bindings
    }

    private static func typeArguments(_ type: QueueType) -> [String: TopologyArgument] {
        ["x-queue-type": .string(type.rawValue)]
    }
}
