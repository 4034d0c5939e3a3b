// The in-memory broker's sessions (`BrokerSessionOpening`): what the operator tools open per
// operation. A session consumes, gets, settles, publishes and declares on the shared broker;
// closing it ends its consumers and hands back what it did not settle, as RabbitMQ does when a
// connection closes.
import AMQPClient
import Synchronization

extension InMemoryBroker {
    public struct Session: BrokerSession {
        let broker: InMemoryBroker
        let id: Int

        public func consume(queue: String, prefetch: UInt16, maxBodySize: Int) async throws -> Consumer {
            try broker.consume(queue: queue, prefetch: prefetch, maxBodySize: maxBodySize, session: id)
        }

        public func consume(queue: String, prefetch: UInt16, cuttingBodiesAt limit: Int) async throws -> Consumer {
            try broker.consume(queue: queue, prefetch: prefetch, maxBodySize: limit, cutsBodies: true, session: id)
        }

        public func get(queue: String, maxBodySize: Int) async throws -> AMQPDelivery? {
            try broker.get(queue: queue, maxBodySize: maxBodySize, session: id)
        }

        @discardableResult
        public func ackNow(_ delivery: AMQPDelivery) -> AMQPSettlement {
            broker.ack(delivery, session: id)
        }

        @discardableResult
        public func nack(_ delivery: AMQPDelivery, requeue: Bool) async -> AMQPSettlement {
            broker.nack(delivery, requeue: requeue, session: id)
        }

        public func publish(_ message: AMQPOutboundMessage) async throws { try await broker.publish(message) }
        public func declare(_ plan: TopologyPlan) async throws { try await broker.declare(plan) }
        public func declareExchange(_ exchange: ExchangeDeclaration) async throws { try await broker.declareExchange(exchange) }

        @discardableResult
        public func declareQueue(_ queue: QueueDeclaration) async throws -> AMQPQueueInfo { try await broker.declareQueue(queue) }

        @discardableResult
        public func deleteQueue(_ name: String, ifUnused: Bool, ifEmpty: Bool) async throws -> UInt32 {
            try await broker.deleteQueue(name, ifUnused: ifUnused, ifEmpty: ifEmpty)
        }

        @discardableResult
        public func purgeQueue(_ name: String) async throws -> UInt32 { try await broker.purgeQueue(name) }
        public func inspectQueue(_ name: String) async throws -> AMQPQueueInfo { try await broker.inspectQueue(name) }

        /// Ends the session's consumers and hands back every delivery it did not settle.
        public func close() async { broker.close(session: id) }
    }

    public func open(_ purpose: String) async throws -> Session {
        let id = try store.withLock { state in
            if state.connectionState == .disconnected { throw AMQPError(.connectionLost, "the in-memory broker is not connected") }
            state.nextSession += 1
            state.openSessions.insert(state.nextSession)
            state.sessionPurposes.append(purpose)
            return state.nextSession
        }
        return Session(broker: self, id: id)
    }

    func close(session: Int) {
        let ended = store.withLock { state -> [DeliveryBuffer] in
            guard state.openSessions.remove(session) != nil else { return [] }
            let ids = state.consumers.filter { $0.value.session == session }.map(\.key)
            let ended = ids.compactMap { state.consumers.removeValue(forKey: $0)?.deliveries }
            Self.handBack(&state) { $0.session == session }
            return ended
        }
        for deliveries in ended { deliveries.finish() }
    }
}
