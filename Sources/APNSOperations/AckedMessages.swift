import AMQPClient
import APNSTopology

/// The messages an operator's move or purge acked, kept to recognise them if the broker hands
/// them back. RabbitMQ's quorum queues apply acks as low-priority commands, and the close of a
/// channel can overtake acks sent just before it (rabbitmq-server#10327, open): the message
/// then goes back to its queue as if never acked. Such a message is the same message
/// redelivered: equal exchange, routing key, properties and body, `redelivered` set, and a
/// higher `x-delivery-count`, which only quorum queues write and only their redeliveries raise.
///
/// A fresh copy the worker published later is told apart by its headers (`x-apns-failed-at`,
/// the attempts) and by not being redelivered. Pure: tested without a broker.
struct AckedMessages {
    /// What stays equal when the broker hands a message back; the delivery count is left out.
    private struct Identity: Hashable {
        var exchange: String
        var routingKey: String
        var properties: AMQPProperties
        var body: [UInt8]

        init(_ message: AMQPDeliveredMessage) {
            exchange = message.exchange
            routingKey = message.routingKey
            properties = message.properties
            var envelope = JobEnvelope(properties.headers)
            envelope.forward()
            properties.setHeaders(envelope)
            body = message.body
        }
    }

    /// Per queue, per message, the delivery counts the acked copies had (several copies of one
    /// message can be acked).
    private var acked: [String: [Identity: [Int]]] = [:]

    var isEmpty: Bool { acked.isEmpty }
    var count: Int { acked.values.reduce(0) { $0 + $1.values.reduce(0) { $0 + $1.count } } }
    /// The queues with acked messages, in a stable order.
    var queues: [String] { acked.keys.sorted() }

    /// `message`, taken from `queue`, was acked.
    mutating func acked(_ message: AMQPDeliveredMessage, in queue: String) {
        acked[queue, default: [:]][Identity(message), default: []].append(Self.deliveryCount(message))
    }

    /// Whether `message`, just taken from `queue`, is one of the acked ones handed back. If so it
    /// is no longer counted as acked: ack it again and record that with `acked(_:in:)`.
    mutating func takeIfHandedBack(_ message: AMQPDeliveredMessage, from queue: String) -> Bool {
        guard message.redelivered else { return false }
        let identity = Identity(message)
        let count = Self.deliveryCount(message)
        // The copy it most likely is: the one acked with the highest count below its own.
        guard var counts = acked[queue]?[identity],
            let index = counts.indices.filter({ counts[$0] < count }).max(by: { counts[$0] < counts[$1] })
        else { return false }
        counts.remove(at: index)
        acked[queue]?[identity] = counts.isEmpty ? nil : counts
        if acked[queue]?.isEmpty == true { acked[queue] = nil }
        return true
    }

    /// Forgets everything acked in `queue` (checked, and nothing came back).
    mutating func forget(_ queue: String) { acked[queue] = nil }

    private static func deliveryCount(_ message: AMQPDeliveredMessage) -> Int {
        JobEnvelope(message).deliveryCount ?? 0
    }
}
