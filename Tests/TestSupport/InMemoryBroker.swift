// A broker in memory behind the client's seams (`MessageConsuming`, `MessageFetching`,
// `ConfirmedPublishing`, `TopologyDeclaring`, `BrokerConnectionStatus`), so that the logic of
// the fleet, the registry's consumers, the feedback poller and the operator tools is tested
// without a socket. It follows RabbitMQ's shapes that this logic relies on (AMQP 0-9-1): the
// default exchange routes to the queue named by the routing key, direct and fanout exchanges
// through their bindings, a consumer gets at most `prefetch` unacked deliveries, a nack with
// requeue puts the message back at the head of its queue marked redelivered, a passive declare
// of a missing queue fails with 404, deleting a queue cancels its consumers, and a session
// (`open`, the operator tools' connection of their own) that closes hands every delivery it
// did not settle back to the head of its queue, in order, marked redelivered, as RabbitMQ does
// with a closed connection's. What RabbitMQ itself does (confirms, recovery, quorum queues) is
// tested against RabbitMQ, never here.
import AMQPClient
import Synchronization

public final class InMemoryBroker: MessageConsuming, MessageFetching, ConfirmedPublishing, TopologyDeclaring, BrokerConnectionStatus,
    BrokerSessionOpening
{
    public struct Settled: Sendable, Hashable {
        public var queue: String
        public var body: [UInt8]
        /// nil for an ack; the requeue flag of a nack.
        public var requeue: Bool?

        public init(queue: String, body: [UInt8], requeue: Bool?) {
            self.queue = queue
            self.body = body
            self.requeue = requeue
        }
    }

    struct Queue {
        var ready: [AMQPDeliveredMessage] = []
        var declaration: QueueDeclaration
    }

    struct ConsumerEntry {
        var queue: String
        var prefetch: Int
        /// As on the real connection: a larger body is handed out empty, marked with its size.
        var maxBodySize: Int
        /// A larger body is handed out cut to `maxBodySize` bytes instead of empty.
        var cutsBodies = false
        var unacked = 0
        var deliveries: DeliveryBuffer
        /// The session that started it; nil for the broker's own calls.
        var session: Int?
    }

    struct Unacked {
        var queue: String
        var message: AMQPDeliveredMessage
        var consumer: Int?
        var session: Int?
    }

    struct State {
        var queues: [String: Queue] = [:]
        var exchanges: [String: ExchangeDeclaration] = [:]
        var bindings: Set<BindingDeclaration> = []
        var plans: [TopologyPlan] = []
        var consumers: [Int: ConsumerEntry] = [:]
        var unacked: [UInt64: Unacked] = [:]
        var nextTag: UInt64 = 0
        var nextConsumer = 0
        var published: [AMQPOutboundMessage] = []
        var settled: [Settled] = []
        var failPublishes = false
        var connectionState: AMQPConnectionState = .connected
        var openSessions: Set<Int> = []
        var nextSession = 0
        var sessionPurposes: [String] = []
        var onInspect: (@Sendable (String) async -> Void)?
    }

    let store = Mutex(State())

    public init() {}

    // MARK: What a test sets up and looks at

    /// Called with the queue's name before every `inspectQueue` (a passive declare) answers: a
    /// test counts them, or holds one to see what goes on meanwhile.
    public var onInspect: (@Sendable (String) async -> Void)? {
        get { store.withLock { $0.onInspect } }
        set { store.withLock { $0.onInspect = newValue } }
    }

    /// Publishes fail as on a lost connection while true.
    public var failPublishes: Bool {
        get { store.withLock { $0.failPublishes } }
        set { store.withLock { $0.failPublishes = newValue } }
    }

    /// What the connection reports (`connected` unless a test says otherwise).
    public var state: AMQPConnectionState {
        get { store.withLock { $0.connectionState } }
        set { store.withLock { $0.connectionState = newValue } }
    }

    /// Every message published and confirmed, in order.
    public var published: [AMQPOutboundMessage] { store.withLock { $0.published } }
    /// Every ack and nack, in order.
    public var settled: [Settled] { store.withLock { $0.settled } }
    /// The plans declared with `declare(_:)`.
    public var declaredPlans: [TopologyPlan] { store.withLock { $0.plans } }
    /// Deliveries handed out and not settled yet.
    public var unackedCount: Int { store.withLock { $0.unacked.count } }
    /// Consumers running now.
    public var consumerCount: Int { store.withLock { $0.consumers.count } }
    /// Sessions opened and not closed yet.
    public var openSessionCount: Int { store.withLock { $0.openSessions.count } }
    /// The purpose of every session opened, in order.
    public var sessionPurposes: [String] { store.withLock { $0.sessionPurposes } }

    /// The messages ready in a queue, in order (nil when it does not exist).
    public func readyMessages(_ queue: String) -> [AMQPDeliveredMessage]? {
        store.withLock { $0.queues[queue]?.ready }
    }

    /// The bodies ready in a queue, in order (nil when it does not exist).
    public func ready(_ queue: String) -> [[UInt8]]? {
        store.withLock { $0.queues[queue]?.ready.map(\.body) }
    }

    public func queueNames() -> [String] { store.withLock { $0.queues.keys.sorted() } }

    /// Puts a message in a queue (declaring the queue if needed), as another client's publish would.
    public func enqueue(_ queue: String, body: [UInt8], properties: AMQPProperties = AMQPProperties()) {
        store.withLock { state in
            if state.queues[queue] == nil { state.queues[queue] = Queue(declaration: QueueDeclaration(name: queue)) }
            state.queues[queue]!.ready.append(
                AMQPDeliveredMessage(exchange: "", routingKey: queue, redelivered: false, body: body, properties: properties))
            Self.dispatch(&state, queue)
        }
    }

    /// The connection drops: every unacked delivery goes back to the head of its queue (in
    /// delivery order), marked redelivered; consumers stay, as the real client restores them.
    public func loseConnection() {
        store.withLock { state in
            for id in state.consumers.keys { state.consumers[id]!.unacked = 0 }
            Self.handBack(&state) { _ in true }
        }
    }

    // MARK: ConfirmedPublishing

    public func publish(_ message: AMQPOutboundMessage) async throws {
        try store.withLock { state in
            if state.failPublishes { throw AMQPError(.connectionLost, "the in-memory broker refuses publishes") }
            let targets: [String]
            if message.exchange.isEmpty {
                targets = state.queues[message.routingKey] == nil ? [] : [message.routingKey]
            } else {
                guard let exchange = state.exchanges[message.exchange] else {
                    throw AMQPError(.channelClosed, "no exchange '\(message.exchange)'", replyCode: 404, replyText: "NOT_FOUND", exchange: message.exchange)
                }
                targets = state.bindings
                    .filter { $0.exchange == exchange.name && (exchange.kind == .fanout || $0.routingKey == message.routingKey) }
                    .map(\.queue).sorted()
            }
            if targets.isEmpty, message.mandatory {
                throw AMQPError(.publishReturned, "no queue for '\(message.routingKey)'", replyCode: 312, replyText: "NO_ROUTE", exchange: message.exchange)
            }
            state.published.append(message)
            for queue in targets {
                state.queues[queue]?.ready.append(
                    AMQPDeliveredMessage(
                        exchange: message.exchange, routingKey: message.routingKey, redelivered: false, body: message.body,
                        properties: message.properties))
                Self.dispatch(&state, queue)
            }
        }
    }

    // MARK: MessageConsuming, MessageFetching

    /// Deliveries through the real consumer's buffer: an iterator that can be sent to another
    /// task, and a wait for the next delivery that may be cancelled without ending the sequence.
    public struct Consumer: MessageConsumer {
        public typealias Element = AMQPDelivery
        let deliveries: DeliveryBuffer
        let id: Int
        let broker: InMemoryBroker
        public func makeAsyncIterator() -> Iterator { Iterator(deliveries: deliveries) }
        public func cancel() async { broker.cancel(id) }

        public struct Iterator: AsyncIteratorProtocol, Sendable {
            let deliveries: DeliveryBuffer
            public mutating func next() async throws -> AMQPDelivery? { try await deliveries.next() }
        }
    }

    public func consume(queue: String, prefetch: UInt16, maxBodySize: Int = .max) async throws -> Consumer {
        try consume(queue: queue, prefetch: prefetch, maxBodySize: maxBodySize, session: nil)
    }

    func consume(queue: String, prefetch: UInt16, maxBodySize: Int, cutsBodies: Bool = false, session: Int?) throws -> Consumer {
        let deliveries = DeliveryBuffer()
        let id = try store.withLock { state in
            guard state.queues[queue] != nil else {
                throw AMQPError(.channelClosed, "no queue '\(queue)'", replyCode: 404, replyText: "NOT_FOUND", queue: queue)
            }
            state.nextConsumer += 1
            state.consumers[state.nextConsumer] = ConsumerEntry(
                queue: queue, prefetch: prefetch == 0 ? .max : Int(prefetch), maxBodySize: maxBodySize, cutsBodies: cutsBodies,
                deliveries: deliveries, session: session)
            Self.dispatch(&state, queue)
            return state.nextConsumer
        }
        return Consumer(deliveries: deliveries, id: id, broker: self)
    }

    func cancel(_ id: Int) {
        let deliveries = store.withLock { $0.consumers.removeValue(forKey: id)?.deliveries }
        deliveries?.finish()
    }

    public func get(queue: String, maxBodySize: Int) async throws -> AMQPDelivery? {
        try get(queue: queue, maxBodySize: maxBodySize, session: nil)
    }

    func get(queue: String, maxBodySize: Int = .max, session: Int?) throws -> AMQPDelivery? {
        try store.withLock { state in
            guard state.queues[queue] != nil else {
                throw AMQPError(.channelClosed, "no queue '\(queue)'", replyCode: 404, replyText: "NOT_FOUND", queue: queue)
            }
            guard !state.queues[queue]!.ready.isEmpty else { return nil }
            let message = state.queues[queue]!.ready.removeFirst()
            return Self.handOut(&state, message, queue: queue, consumer: nil, session: session, maxBodySize: maxBodySize)
        }
    }

    @discardableResult
    public func ackNow(_ delivery: AMQPDelivery) -> AMQPSettlement {
        ack(delivery, session: nil)
    }

    func ack(_ delivery: AMQPDelivery, session: Int?) -> AMQPSettlement {
        store.withLock { state in
            guard let entry = Self.settle(&state, delivery, session: session) else { return .stale }
            state.settled.append(Settled(queue: entry.queue, body: entry.message.body, requeue: nil))
            return .settled
        }
    }

    @discardableResult
    public func nack(_ delivery: AMQPDelivery, requeue: Bool) async -> AMQPSettlement {
        nack(delivery, requeue: requeue, session: nil)
    }

    func nack(_ delivery: AMQPDelivery, requeue: Bool, session: Int?) -> AMQPSettlement {
        store.withLock { state in
            guard let entry = Self.settle(&state, delivery, session: session) else { return .stale }
            state.settled.append(Settled(queue: entry.queue, body: entry.message.body, requeue: requeue))
            if requeue {
                var message = entry.message
                message.redelivered = true
                state.queues[entry.queue]?.ready.insert(message, at: 0)
                Self.dispatch(&state, entry.queue)
            }
            return .settled
        }
    }

    // MARK: TopologyDeclaring

    public func declare(_ plan: TopologyPlan) async throws {
        for exchange in plan.exchanges { try await declareExchange(exchange) }
        for queue in plan.queues { try await declareQueue(queue) }
        store.withLock { state in
            state.bindings.formUnion(plan.bindings)
            state.plans.append(plan)
        }
    }

    public func declareExchange(_ exchange: ExchangeDeclaration) async throws {
        try store.withLock { state in
            if let existing = state.exchanges[exchange.name], existing.kind != exchange.kind {
                throw AMQPError(.declarationConflict, "exchange '\(exchange.name)' exists as \(existing.kind)", replyCode: 406, exchange: exchange.name)
            }
            state.exchanges[exchange.name] = exchange
        }
    }

    @discardableResult
    public func declareQueue(_ queue: QueueDeclaration) async throws -> AMQPQueueInfo {
        store.withLock { state in
            if state.queues[queue.name] == nil { state.queues[queue.name] = Queue(declaration: queue) }
            return Self.info(state, queue.name)!
        }
    }

    @discardableResult
    public func deleteQueue(_ name: String, ifUnused: Bool, ifEmpty: Bool) async throws -> UInt32 {
        let (count, cancelled) = store.withLock { state -> (UInt32, [DeliveryBuffer]) in
            guard let queue = state.queues.removeValue(forKey: name) else { return (0, []) }
            state.bindings = state.bindings.filter { $0.queue != name }
            let ids = state.consumers.filter { $0.value.queue == name }.map(\.key)
            let cancelled = ids.compactMap { state.consumers.removeValue(forKey: $0)?.deliveries }
            return (UInt32(queue.ready.count), cancelled)
        }
        for consumer in cancelled {
            consumer.finish(throwing: AMQPError(.consumerCancelled, "queue '\(name)' was deleted", queue: name))
        }
        return count
    }

    @discardableResult
    public func purgeQueue(_ name: String) async throws -> UInt32 {
        try store.withLock { state in
            guard let count = state.queues[name]?.ready.count else {
                throw AMQPError(.channelClosed, "no queue '\(name)'", replyCode: 404, replyText: "NOT_FOUND", queue: name)
            }
            state.queues[name]!.ready.removeAll()
            return UInt32(count)
        }
    }

    public func inspectQueue(_ name: String) async throws -> AMQPQueueInfo {
        if let onInspect = store.withLock({ $0.onInspect }) { await onInspect(name) }
        return try store.withLock { state in
            guard let info = Self.info(state, name) else {
                throw AMQPError(.channelClosed, "no queue '\(name)'", replyCode: 404, replyText: "NOT_FOUND", queue: name)
            }
            return info
        }
    }

    // MARK: Plumbing

    static func info(_ state: State, _ name: String) -> AMQPQueueInfo? {
        guard let queue = state.queues[name] else { return nil }
        return AMQPQueueInfo(
            name: name, messageCount: UInt32(queue.ready.count),
            consumerCount: UInt32(state.consumers.values.filter { $0.queue == name }.count))
    }

    /// Hands ready messages of `queue` to its consumers, round robin, within their prefetch.
    static func dispatch(_ state: inout State, _ queue: String) {
        var progressed = true
        while progressed, state.queues[queue]?.ready.isEmpty == false {
            progressed = false
            for id in state.consumers.keys.sorted() where state.consumers[id]!.queue == queue {
                guard state.consumers[id]!.unacked < state.consumers[id]!.prefetch, state.queues[queue]?.ready.isEmpty == false else { continue }
                let message = state.queues[queue]!.ready.removeFirst()
                state.consumers[id]!.unacked += 1
                let taker = state.consumers[id]!
                let delivery = handOut(
                    &state, message, queue: queue, consumer: id, session: taker.session, maxBodySize: taker.maxBodySize, cutsBodies: taker.cutsBodies)
                state.consumers[id]!.deliveries.push(delivery)
                progressed = true
            }
        }
    }

    /// A body over `maxBodySize` is handed out empty, as the client does (cut to the limit with
    /// `cutsBodies`), with its size in `oversizedBodySize`.
    static func handOut(
        _ state: inout State, _ message: AMQPDeliveredMessage, queue: String, consumer: Int?, session: Int?, maxBodySize: Int,
        cutsBodies: Bool = false
    ) -> AMQPDelivery {
        state.nextTag += 1
        state.unacked[state.nextTag] = Unacked(queue: queue, message: message, consumer: consumer, session: session)
        var handed = message
        if message.body.count > maxBodySize {
            handed.body = cutsBodies ? Array(message.body.prefix(maxBodySize)) : []
            handed.oversizedBodySize = UInt64(message.body.count)
        }
        return AMQPDelivery(
            message: handed, tag: AMQPDeliveryTag(channel: 1, generation: 1, value: state.nextTag),
            consumerTag: consumer.map { "in-memory-\($0)" })
    }

    /// A delivery is settled where it was handed out: another session's settle of it is stale.
    /// Puts the unsettled deliveries that `lost` selects back at the head of their queues, in
    /// delivery order, marked redelivered.
    static func handBack(_ state: inout State, _ lost: (Unacked) -> Bool) {
        let taken = state.unacked.filter { lost($0.value) }.sorted { $0.key < $1.key }
        for (tag, entry) in taken.reversed() {
            state.unacked[tag] = nil
            var message = entry.message
            message.redelivered = true
            state.queues[entry.queue]?.ready.insert(message, at: 0)
        }
        for queue in Set(taken.map(\.value.queue)) { dispatch(&state, queue) }
    }

    static func settle(_ state: inout State, _ delivery: AMQPDelivery, session: Int?) -> Unacked? {
        guard state.unacked[delivery.tag.value]?.session == session,
            let entry = state.unacked.removeValue(forKey: delivery.tag.value)
        else { return nil }
        if let id = entry.consumer, state.consumers[id] != nil {
            state.consumers[id]!.unacked -= 1
            dispatch(&state, entry.queue)
        }
        return entry
    }
}
