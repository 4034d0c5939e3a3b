/// The sync server's delivery events (contract §8): an `AsyncSequence` of what became of the jobs
/// it asked about (`DeliveryOptions.events`, or its bundles' `events`), each acked when the
/// caller says it handled it.
///
/// At-least-once, as the worker publishes them: an event may come twice (a worker killed while
/// the job was in flight). With `dropRepeats`, an event whose `message_id` (`<jobId>.<end>.<attempt>`)
/// this sequence has seen acked already is acked and skipped; the memory of ids is bounded
/// (`rememberedIDs`), and a repeat that crosses a restart of the sync server is not caught: make
/// the handling idempotent where that matters. A message that is not an event is acked and
/// skipped with a warning: anyone who may publish on `apns.events` could send one.
///
/// What a dead event asks of a sync server: log it with its reason, and never publish the job
/// again as it was (it was malformed, too large, refused by Apple or out of attempts).
import AMQPClient
import APNSTopologyNames
import Foundation
import Logging
import Synchronization

extension APNSWorkerClient {
    /// The delivery events of `bundleIDs` (nil: every bundle), of the `ends` given (nil: every
    /// end), from `queue`: a durable queue of the sync server's own, shared by its instances and
    /// keeping events while none runs; nil: a queue of this connection's own that the broker
    /// removes when it closes (events published meanwhile are not kept). Declared again after
    /// every reconnect.
    public func events(
        queue: String? = nil, bundleIDs: [String]? = nil, ends: Set<DeliveryEvent.End>? = nil, dropRepeats: Bool = false,
        prefetch: UInt16 = 100
    ) async throws(APNSWorkerClientError) -> DeliveryEvents {
        let name = queue ?? "apns.events.client.\(UUID().uuidString.lowercased())"
        let plan = TopologyPlan(
            exchanges: [ExchangeDeclaration(name: TopologyNames.eventsExchange, kind: .topic)],
            queues: [QueueDeclaration(name: name, exclusive: queue == nil)],
            bindings: DeliveryEvents.routingKeys(bundleIDs: bundleIDs, ends: ends).map {
                BindingDeclaration(queue: name, exchange: TopologyNames.eventsExchange, routingKey: $0)
            })
        do {
            try await connection.declare(plan)
            let consumer = try await connection.consume(queue: name, prefetch: prefetch, maxBodySize: DeliveryEvents.maxBodyBytes)
            return DeliveryEvents(
                queue: name, consumer: consumer, connection: connection, logger: logger, seen: dropRepeats ? SeenEventIDs() : nil)
        } catch let error as AMQPError {
            throw APNSWorkerClientError.classify(error) ?? .connectionUnavailable(waited: .zero, lastError: error.description)
        } catch {
            throw .broker("\(error)")
        }
    }
}

public struct DeliveryEvents: AsyncSequence, Sendable {
    public typealias Element = DeliveryEventDelivery
    public typealias Failure = any Error

    public let queue: String
    let consumer: AMQPConsumer
    let connection: AMQPConnection
    let logger: Logger
    let seen: SeenEventIDs?

    /// The largest body taken as an event: the worker's are a few hundred bytes.
    public static let maxBodyBytes = 64 * 1024
    /// How many acked event ids `dropRepeats` remembers (the oldest are forgotten first).
    public static let rememberedIDs = 100_000

    /// The bindings for `bundleIDs` and `ends` on the topic exchange (`<bundleID>.<end>`; a bundle
    /// ID has dots, so "any bundle" is `#`).
    static func routingKeys(bundleIDs: [String]?, ends: Set<DeliveryEvent.End>?) -> [String] {
        let endKeys = ends.map { $0.map(\.rawValue).sorted() } ?? ["*"]
        guard let bundleIDs else { return ends == nil ? ["#"] : endKeys.map { "#.\($0)" } }
        return bundleIDs.flatMap { bundle in endKeys.map { "\(bundle).\($0)" } }
    }

    /// Stops new deliveries; events in hand can still be acked.
    public func cancel() async {
        await consumer.cancel()
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(deliveries: consumer.makeAsyncIterator(), connection: connection, logger: logger, seen: seen)
    }

    public struct Iterator: AsyncIteratorProtocol {
        var deliveries: AMQPConsumer.Iterator
        let connection: AMQPConnection
        let logger: Logger
        let seen: SeenEventIDs?

        /// The next event; messages that are no event, and repeats when asked, are acked and skipped.
        public mutating func next() async throws -> DeliveryEventDelivery? {
            while true {
                guard let delivery = try await deliveries.nextDelivery() else { return nil }
                let messageID = delivery.message.properties.messageID ?? ""
                guard delivery.message.oversizedBodySize == nil, let event = DeliveryEvent.parse(delivery.message.body) else {
                    connection.ackNow(delivery)
                    logger.warning("a message on apns.events that is no delivery event was skipped", metadata: ["amqp.body_size": "\(delivery.message.body.count)"])
                    continue
                }
                if let seen, seen.contains(messageID) {
                    connection.ackNow(delivery)
                    continue
                }
                return DeliveryEventDelivery(
                    event: event, messageID: messageID, redelivered: delivery.message.redelivered, delivery: delivery, connection: connection,
                    seen: seen)
            }
        }
    }
}

/// One delivery event, unacked until `ack()`.
public struct DeliveryEventDelivery: Sendable {
    public let event: DeliveryEvent
    /// `<jobId>.<end>.<attempt>`: the same for every copy of one event.
    public let messageID: String
    /// The broker delivered it before: it may have been handled already.
    public let redelivered: Bool
    let delivery: AMQPDelivery
    let connection: AMQPConnection
    let seen: SeenEventIDs?

    /// Tells the broker the event is handled. False when the channel that delivered it is gone:
    /// the broker delivers the event again.
    @discardableResult
    public func ack() -> Bool {
        seen?.insert(messageID)
        return connection.ackNow(delivery) == .settled
    }

    /// Gives the event back to the queue to be delivered again.
    @discardableResult
    public func requeue() async -> Bool {
        await connection.nack(delivery, requeue: true) == .settled
    }
}

/// The ids of events acked, the newest `DeliveryEvents.rememberedIDs`.
final class SeenEventIDs: Sendable {
    private struct State {
        var ids: Set<String> = []
        var order: [String] = []
        var oldest = 0
    }
    private let state = Mutex(State())

    func contains(_ id: String) -> Bool { state.withLock { $0.ids.contains(id) } }

    func insert(_ id: String) {
        state.withLock { state in
            guard state.ids.insert(id).inserted else { return }
            if state.order.count < DeliveryEvents.rememberedIDs {
                state.order.append(id)
            } else {
                state.ids.remove(state.order[state.oldest])
                state.order[state.oldest] = id
                state.oldest = (state.oldest + 1) % state.order.count
            }
        }
    }
}
