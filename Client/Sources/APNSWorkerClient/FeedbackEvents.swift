/// The sync server's feedback consumer: an `AsyncSequence` of the events on `apns.feedback`, read
/// from a durable queue of the sync server's own, each acked when the caller says it handled it.
///
/// At-least-once: an event stays unacked on the broker until `FeedbackDelivery.ack()`; when the
/// consumer or its connection goes away first, the broker delivers it again (to this process
/// after a reconnect, or to the next consumer of the queue). So prune the token, then ack. The
/// broker sends at most `prefetch` unacked events at a time: a caller that never acks stalls.
///
/// A message that is not a feedback event goes to `<queue>.dead` with its body unchanged and
/// headers `x-apns-reason: MalformedFeedback` and `x-apns-error` (one line), then is acked; the
/// sequence goes on with the next message.
import AMQPClient
import Logging

public struct FeedbackEvents: AsyncSequence, Sendable {
    public typealias Element = FeedbackDelivery
    public typealias Failure = any Error

    public let queue: String
    let consumer: AMQPConsumer
    let connection: AMQPConnection
    let logger: Logger

    /// The queue where malformed messages of `queue` go.
    public static func deadQueue(of queue: String) -> String { queue + ".dead" }

    /// Stops new deliveries; events in hand can still be acked, and the unacked rest come back
    /// to the queue when the connection closes.
    public func cancel() async {
        await consumer.cancel()
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(deliveries: consumer.makeAsyncIterator(), queue: queue, connection: connection, logger: logger)
    }

    public struct Iterator: AsyncIteratorProtocol {
        var deliveries: AMQPConsumer.Iterator
        let queue: String
        let connection: AMQPConnection
        let logger: Logger

        /// The next event; malformed messages are dead-lettered and skipped. Throws
        /// `APNSWorkerClientError` when a malformed message could not be dead-lettered (it is
        /// then requeued) or the consumer failed.
        public mutating func next() async throws -> FeedbackDelivery? {
            while true {
                guard let delivery = try await deliveries.nextDelivery() else { return nil }
                let problem: MalformedFeedback
                if let size = delivery.message.oversizedBodySize {
                    problem = MalformedFeedback("the body is \(size) bytes; at most \(FeedbackEvent.maxBodyBytes) are accepted")
                } else {
                    switch FeedbackEvent.parse(delivery.message.body) {
                    case .success(let event):
                        return FeedbackDelivery(event: event, redelivered: delivery.message.redelivered, delivery: delivery, connection: connection)
                    case .failure(let malformed): problem = malformed
                    }
                }
                try await deadLetter(delivery, problem)
            }
        }

        private func deadLetter(_ delivery: AMQPDelivery, _ problem: MalformedFeedback) async throws {
            var properties = AMQPProperties.persistentJSON
            properties.headers = ["x-apns-reason": .string("MalformedFeedback"), "x-apns-error": .string(problem.message)]
            let message = AMQPOutboundMessage(
                exchange: "", routingKey: FeedbackEvents.deadQueue(of: queue), body: delivery.message.body, properties: properties)
            do {
                try await connection.publish(message)
            } catch {
                await connection.nack(delivery, requeue: true)
                throw APNSWorkerClientError.broker("a malformed feedback message could not be dead-lettered (requeued): \(error)")
            }
            connection.ackNow(delivery)
            logger.warning(
                "malformed feedback message dead-lettered",
                metadata: ["apns.queue": "\(queue)", "apns.dead_queue": "\(FeedbackEvents.deadQueue(of: queue))", "apns.error": "\(problem.message)"])
        }
    }
}

/// One feedback event, unacked until `ack()`.
public struct FeedbackDelivery: Sendable {
    public let event: FeedbackEvent
    /// The broker delivered it before (a consumer went away without acking it): it may have
    /// been handled already, so handling must be idempotent (pruning a token twice is).
    public let redelivered: Bool
    let delivery: AMQPDelivery
    let connection: AMQPConnection

    /// Tells the broker the event is handled: it is gone for good. False when the channel that
    /// delivered it is gone (the connection was lost): the broker delivers the event again.
    @discardableResult
    public func ack() -> Bool {
        connection.ackNow(delivery) == .settled
    }

    /// Gives the event back to the queue to be delivered again (e.g. the database was down).
    @discardableResult
    public func requeue() async -> Bool {
        await connection.nack(delivery, requeue: true) == .settled
    }
}
