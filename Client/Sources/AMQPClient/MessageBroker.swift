// The broker behind narrow seams: one protocol per use (consume and settle, take one message,
// confirmed publish, declare and inspect, the connection's state), so that every user takes
// only what it needs and the code deciding what to do with messages can be tested against a
// fake broker, with no socket. `AMQPConnection` is the real one and conforms to all of them.
//
// Users take them as generic parameters, never as existentials, on every path a message takes:
// once the optimiser specialises them for `AMQPConnection` the calls are direct, so the seam
// costs nothing per message.

/// Settles deliveries of a consumer or of `basic.get` (AMQP 0-9-1 `basic.ack` / `basic.nack`).
public protocol DeliverySettling: Sendable {
    /// Acknowledges a delivery from any thread, without suspending (an AMQP ack has no reply;
    /// the worker settles most jobs on the event loop that received APNs' answer): it queues
    /// the ack and never blocks.
    @discardableResult func ackNow(_ delivery: AMQPDelivery) -> AMQPSettlement
    /// `requeue: false` dead-letters or drops the message.
    @discardableResult func nack(_ delivery: AMQPDelivery, requeue: Bool) async -> AMQPSettlement
}

/// Consumes a queue and settles what it delivers.
public protocol MessageConsuming: DeliverySettling {
    associatedtype Consumer: MessageConsumer

    /// Starts a consumer with manual acks and at most `prefetch` unacknowledged deliveries; a
    /// body larger than `maxBodySize` is dropped on arrival (`AMQPDeliveredMessage.oversizedBodySize`).
    func consume(queue: String, prefetch: UInt16, maxBodySize: Int) async throws -> Consumer
    /// As above; a body over `maxBodySize` is first copied where `oversizedDeadLetter` says,
    /// frame by frame (`AMQPConnection.consume(queue:prefetch:maxBodySize:oversizedDeadLetter:)`).
    func consume(
        queue: String, prefetch: UInt16, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?
    ) async throws -> Consumer
    /// Replaces `old` by a consumer of `queue` with `prefetch`, `maxBodySize` and
    /// `oversizedDeadLetter` as passed now (old's may have been others); old's sequence ends
    /// after the deliveries it already received, which are settled as before.
    /// `AMQPConnection` keeps both on old's channel (`consume(replacing:prefetch:maxBodySize:oversizedDeadLetter:)`).
    func consume(
        replacing old: Consumer, queue: String, prefetch: UInt16, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?
    ) async throws -> Consumer
}

/// Takes one message at a time (`basic.get`) and settles it.
public protocol MessageFetching: DeliverySettling {
    /// The next message of `queue`, or nil when it is empty; unacked until settled. A body over
    /// `maxBodySize` is not kept: the delivery comes empty with `oversizedBodySize` set.
    func get(queue: String, maxBodySize: Int) async throws -> AMQPDelivery?
    /// As above; a body over `maxBodySize` is first copied where `oversizedDeadLetter` says, frame
    /// by frame (`AMQPConnection.get(queue:maxBodySize:oversizedDeadLetter:)`).
    func get(queue: String, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?) async throws -> AMQPDelivery?
}

extension MessageFetching {
    /// A broker that cannot copy a body as it arrives delivers an oversized message unmarked.
    public func get(queue: String, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?) async throws -> AMQPDelivery? {
        try await get(queue: queue, maxBodySize: maxBodySize)
    }

    /// The next message of `queue` with its whole body, or nil when it is empty.
    public func get(queue: String) async throws -> AMQPDelivery? {
        try await get(queue: queue, maxBodySize: .max)
    }
}

/// Publishes with publisher confirms.
public protocol ConfirmedPublishing: Sendable {
    /// Returns once the broker confirmed the message; throws when it did not take it.
    func publish(_ message: AMQPOutboundMessage) async throws
    /// Publishes `messages` and returns once the broker has settled each: nil where it
    /// confirmed, else why not. `AMQPConnection` sends them as one command and resumes once.
    func publish(_ messages: [AMQPOutboundMessage]) async -> [AMQPError?]
}

extension ConfirmedPublishing {
    /// Each message published on its own, all at once; an error that is no `AMQPError` (a
    /// fake's, cancellation) is reported as a lost connection.
    public func publish(_ messages: [AMQPOutboundMessage]) async -> [AMQPError?] {
        await withTaskGroup(of: (Int, AMQPError?).self) { group in
            for (index, message) in messages.enumerated() {
                group.addTask {
                    do {
                        try await self.publish(message)
                        return (index, nil)
                    } catch let error as AMQPError {
                        return (index, error)
                    } catch {
                        return (index, AMQPError(.connectionLost, "\(error)"))
                    }
                }
            }
            var results = [AMQPError?](repeating: nil, count: messages.count)
            for await (index, error) in group { results[index] = error }
            return results
        }
    }
}

/// Declares, inspects, purges and deletes exchanges and queues (the topology and the operator
/// tools). See `AMQPConnection` for what each does on the broker.
public protocol TopologyDeclaring: Sendable {
    /// Declares a plan and remembers it: declared again after every reconnect.
    func declare(_ plan: TopologyPlan) async throws
    func declareExchange(_ exchange: ExchangeDeclaration) async throws
    @discardableResult func declareQueue(_ queue: QueueDeclaration) async throws -> AMQPQueueInfo
    @discardableResult func deleteQueue(_ name: String, ifUnused: Bool, ifEmpty: Bool) async throws -> UInt32
    @discardableResult func purgeQueue(_ name: String) async throws -> UInt32
    /// Passive declare: `channelClosed` with reply code 404 when the queue does not exist.
    func inspectQueue(_ name: String) async throws -> AMQPQueueInfo
}

/// Where the connection stands (readiness, the fleet's heartbeat).
public protocol BrokerConnectionStatus: Sendable {
    var state: AMQPConnectionState { get }
}

/// The deliveries of one consumer (see `AMQPConsumer`): they end after `cancel()`, once the
/// deliveries already received have been read.
public protocol MessageConsumer: AsyncSequence, Sendable where Element == AMQPDelivery {
    func cancel() async
    /// Its owner is done with it (see `AMQPConsumer.finish(handingBack:)`): `handingBack`, the
    /// deliveries it handed out and nobody settled go back to the queue now.
    func finish(handingBack: Bool) async
}

extension MessageConsumer {
    /// A broker without channels to give back: the consumer is cancelled.
    public func finish(handingBack: Bool) async {
        await cancel()
    }
}

/// What a bundle pipeline uses: consume, take one message (a probe), settle, confirmed publish.
public typealias MessageBroker = MessageConsuming & MessageFetching & ConfirmedPublishing

extension MessageConsuming {
    /// A broker that cannot copy a body as it arrives delivers an oversized message unmarked.
    public func consume(
        queue: String, prefetch: UInt16, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?
    ) async throws -> Consumer {
        try await consume(queue: queue, prefetch: prefetch, maxBodySize: maxBodySize)
    }

    /// A new consumer first, then the old one cancelled.
    public func consume(
        replacing old: Consumer, queue: String, prefetch: UInt16, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?
    ) async throws -> Consumer {
        let started = try await consume(queue: queue, prefetch: prefetch, maxBodySize: maxBodySize, oversizedDeadLetter: oversizedDeadLetter)
        await old.cancel()
        return started
    }
}

extension DeliverySettling {
    /// `ackNow`, for callers in a task.
    @discardableResult
    public func ack(_ delivery: AMQPDelivery) async -> AMQPSettlement {
        ackNow(delivery)
    }
}

extension TopologyDeclaring {
    /// Whether a queue exists (a passive declare): false on the broker's 404, which closes only
    /// the channel it was asked on.
    public func queueExists(_ name: String) async throws -> Bool {
        try await inspectQueueIfExists(name) != nil
    }

    /// The counts of a queue, or nil when it does not exist.
    public func inspectQueueIfExists(_ name: String) async throws -> AMQPQueueInfo? {
        do {
            return try await inspectQueue(name)
        } catch let error as AMQPError where error.replyCode == 404 {
            return nil
        }
    }
}

extension AMQPConnection: MessageConsuming, MessageFetching, ConfirmedPublishing, TopologyDeclaring, BrokerConnectionStatus {
    /// On old's channel (`consume(replacing:prefetch:maxBodySize:oversizedDeadLetter:)`).
    public func consume(
        replacing old: AMQPConsumer, queue: String, prefetch: UInt16, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?
    ) async throws -> AMQPConsumer {
        try await consume(replacing: old, prefetch: prefetch, maxBodySize: maxBodySize, oversizedDeadLetter: oversizedDeadLetter)
    }
}
extension AMQPConsumer: MessageConsumer {}
