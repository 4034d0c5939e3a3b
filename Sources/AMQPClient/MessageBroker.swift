/// The part of a broker connection that a consumer of jobs uses (consume, get, ack, nack,
/// confirmed publish), as a protocol so that the code deciding what to do with each message can
/// be tested against a fake broker, with no socket. `AMQPConnection` is the real one.
///
/// Users take it as a generic parameter, not as an existential: once the optimiser specialises
/// them for `AMQPConnection` the calls are direct, so the seam costs nothing per message.
public protocol MessageBroker: Sendable {
    associatedtype Consumer: MessageConsumer

    /// Starts a consumer with manual acks and at most `prefetch` unacknowledged deliveries; a
    /// body larger than `maxBodySize` is dropped on arrival (`AMQPDeliveredMessage.oversizedBodySize`).
    func consume(queue: String, prefetch: UInt16, maxBodySize: Int) async throws -> Consumer
    /// `basic.get`: the next message of `queue`, or nil when it is empty.
    func get(queue: String) async throws -> AMQPDelivery?
    /// Acknowledges a delivery from any thread, without suspending (an AMQP ack has no reply;
    /// the worker settles most jobs on the event loop that received APNs' answer): it queues
    /// the ack and never blocks.
    @discardableResult func ackNow(_ delivery: AMQPDelivery) -> AMQPSettlement
    @discardableResult func nack(_ delivery: AMQPDelivery, requeue: Bool) async -> AMQPSettlement
    /// Returns once the broker confirmed the message; throws when it did not take it.
    func publish(_ message: AMQPOutboundMessage) async throws
}

/// The deliveries of one consumer (see `AMQPConsumer`): they end after `cancel()`, once the
/// deliveries already received have been read.
public protocol MessageConsumer: AsyncSequence, Sendable where Element == AMQPDelivery {
    func cancel() async
}

extension MessageBroker {
    /// `ackNow`, for callers in a task.
    @discardableResult
    public func ack(_ delivery: AMQPDelivery) async -> AMQPSettlement {
        ackNow(delivery)
    }
}

extension AMQPConnection: MessageBroker {}
extension AMQPConsumer: MessageConsumer {}
