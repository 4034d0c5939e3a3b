import AMQPClient
import Foundation

/// The per-message work of one queue consumer (`QueueConsumer`): what its queue is, what a
/// held consumer's probe is, and what is done with a delivery the machine started. (The
/// machine's news is told by a closure given to `QueueConsumer.init`: it comes from any thread.) The bundle pipeline (`BundlePipeline`: parse, gate, send to APNs,
/// route) and the registry's consumers (`RegistryConsumer`: a handler on PostgreSQL) are the two
/// kinds of work.
package protocol ConsumerWork: Sendable {
    associatedtype Broker: MessageConsuming

    var broker: Broker { get }
    var queue: String { get }
    /// A body larger than this is never assembled (`AMQPDeliveredMessage.oversizedBodySize`).
    var maxBodySize: Int { get }

    /// Where a body over `maxBodySize` is copied as it arrives, frame by frame, body unchanged
    /// (nil: no copy; the work rejects it for the broker to dead-letter).
    var oversizedDeadLetter: AMQPOversizedDeadLetter? { get }

    /// The publish time to keep as the newest taken (the fleet's queue latency), if any.
    func publishTime(of delivery: AMQPDelivery) -> Date?

    /// A held consumer's probe: a job to work as the probe (`basic.get`), or an answer of its own
    /// (a ping). Throwing ends `run()`, as a consumer's error does.
    func probe() async throws -> ConsumerProbe

    /// One delivery the machine counted in flight. It must come to exactly one end through
    /// `consumer`: `settled(probe:)`, or an `answered` the machine drops; work that must await
    /// the broker or a database goes through `consumer.settleLater`. Runs in the consumer's task
    /// (or the probe's): it must not wait for anything but a suspension-free start.
    func start(_ delivery: AMQPDelivery, probe: Bool, on consumer: QueueConsumer<Self>)

    /// A delivery the consumer received and does not start (held, paused, stopping, replaced):
    /// back to the broker unsent. Runs in the consumer's task (or the probe's); work that must
    /// await the broker goes through `consumer.settleLater`.
    func handBack(_ delivery: AMQPDelivery, on consumer: QueueConsumer<Self>) async
}

extension ConsumerWork {
    /// A nack with requeue: the message goes back where it was.
    package func handBack(_ delivery: AMQPDelivery, on consumer: QueueConsumer<Self>) async {
        await broker.nack(delivery, requeue: true)
    }
}

/// What a held consumer's probe found.
package enum ConsumerProbe: Sendable {
    /// A job taken to be worked as the probe; its breaker signal decides.
    case found(AMQPDelivery)
    /// Nothing proven: the queue was empty, or the fault is still there.
    case nothing
    /// The probe proved the fault gone.
    case healthy
}
