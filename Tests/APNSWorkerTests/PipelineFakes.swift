// Stand-ins for the pipeline's unit tests: a broker behind `MessageBroker` that keeps its queue
// in memory, a transport whose answers the test decides, and a clock the test moves. No socket:
// the broker's real behaviour is covered by the end-to-end tests against RabbitMQ.
import AMQPClient
import APNSModel
import CancellableWait
import Foundation
import QueueConsumer
import Synchronization

@testable import APNSWorker

/// One work queue in memory, with RabbitMQ's shapes of consume, get, ack, nack and confirmed
/// publish. A message published to the work queue (a held job sent back) joins its end, as on
/// the broker; a nack with requeue puts it back at the front, marked redelivered.
final class FakeBroker: MessageBroker {
    struct State {
        var ready: [AMQPDelivery] = []
        var acked: [AMQPDeliveryTag] = []
        var nacked: [AMQPDeliveryTag] = []
        /// Nacked without requeue: the broker dead-letters them (or drops them without a dead-letter exchange).
        var rejected: [AMQPDeliveryTag] = []
        var published: [AMQPOutboundMessage] = []
        var consumer: AsyncThrowingStream<AMQPDelivery, any Error>.Continuation?
        /// Which start the live consumer is (`consumersStarted` when it began): a cancel of an
        /// older one (a consumer started again after a pause replaces the cancelled one) ends nothing.
        var consumerNumber = 0
        var consumersStarted = 0
        var consumersCancelled = 0
        var gets = 0
        var nextTag: UInt64 = 0
        /// When set, publishes fail as a lost connection would.
        var failPublishes = false
        /// When set, publishes wait for a confirm that never comes, until their task is cancelled.
        var stallPublishes = false
        var stalled: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        var publishesCancelled = 0
        /// Each batch published as one (`publish(_:)` of an array), as the pipeline made it.
        var batches: [[AMQPOutboundMessage]] = []
    }

    let workQueue: String
    let state = Mutex(State())

    init(workQueue: String) {
        self.workQueue = workQueue
    }

    var snapshot: State { state.withLock { $0 } }

    /// A job arrives from the sync server.
    func enqueue(
        body: [UInt8], messageID: String? = nil, redelivered: Bool = false, headers: AMQPTable? = nil, oversizedBodySize: UInt64? = nil,
        timestamp: Date? = nil
    ) {
        state.withLock { state in
            var delivery = Self.delivery(&state, body: body, messageID: messageID, redelivered: redelivered)
            delivery.message.properties.headers = headers
            delivery.message.properties.timestamp = timestamp
            delivery.message.oversizedBodySize = oversizedBodySize
            if let consumer = state.consumer {
                consumer.yield(delivery)
            } else {
                state.ready.append(delivery)
            }
        }
    }

    private static func delivery(_ state: inout State, body: [UInt8], messageID: String?, redelivered: Bool) -> AMQPDelivery {
        state.nextTag += 1
        var properties = AMQPProperties.persistentJSON
        properties.messageID = messageID
        return AMQPDelivery(
            message: AMQPDeliveredMessage(exchange: "apns.jobs", routingKey: "", redelivered: redelivered, body: body, properties: properties),
            tag: AMQPDeliveryTag(channel: 1, generation: 1, value: state.nextTag), consumerTag: nil)
    }

    struct Consumer: MessageConsumer {
        typealias Element = AMQPDelivery
        let stream: AsyncThrowingStream<AMQPDelivery, any Error>
        let broker: FakeBroker
        let number: Int
        func makeAsyncIterator() -> AsyncThrowingStream<AMQPDelivery, any Error>.AsyncIterator { stream.makeAsyncIterator() }
        func cancel() async { broker.cancelConsumer(number) }
    }

    func consume(queue: String, prefetch: UInt16, maxBodySize: Int) async throws -> Consumer {
        precondition(queue == workQueue)
        let (stream, continuation) = AsyncThrowingStream<AMQPDelivery, any Error>.makeStream()
        let number = state.withLock { state -> Int in
            precondition(state.consumer == nil, "one consumer at a time")
            state.consumersStarted += 1
            state.consumerNumber = state.consumersStarted
            state.consumer = continuation
            for delivery in state.ready { continuation.yield(delivery) }
            state.ready.removeAll()
            return state.consumerNumber
        }
        return Consumer(stream: stream, broker: self, number: number)
    }

    private func cancelConsumer(_ number: Int) {
        let consumer = state.withLock { state -> AsyncThrowingStream<AMQPDelivery, any Error>.Continuation? in
            guard state.consumerNumber == number, let consumer = state.consumer else { return nil }
            state.consumer = nil
            state.consumersCancelled += 1
            return consumer
        }
        consumer?.finish()
    }

    func get(queue: String, maxBodySize: Int) async throws -> AMQPDelivery? {
        state.withLock { state in
            state.gets += 1
            return state.ready.isEmpty ? nil : state.ready.removeFirst()
        }
    }

    @discardableResult
    func ackNow(_ delivery: AMQPDelivery) -> AMQPSettlement {
        state.withLock { $0.acked.append(delivery.tag) }
        return .settled
    }

    @discardableResult
    func nack(_ delivery: AMQPDelivery, requeue: Bool) async -> AMQPSettlement {
        state.withLock { state in
            state.nacked.append(delivery.tag)
            guard requeue else { return state.rejected.append(delivery.tag) }
            var again = delivery
            again.message.redelivered = true
            if let consumer = state.consumer { consumer.yield(again) } else { state.ready.insert(again, at: 0) }
        }
        return .settled
    }

    /// Recorded as one batch, then published one by one as `publish` does each.
    func publish(_ messages: [AMQPOutboundMessage]) async -> [AMQPError?] {
        state.withLock { $0.batches.append(messages) }
        var results: [AMQPError?] = []
        for message in messages {
            do {
                try await publish(message)
                results.append(nil)
            } catch {
                results.append(error as? AMQPError ?? AMQPError(.connectionLost, "\(error)"))
            }
        }
        return results
    }

    func publish(_ message: AMQPOutboundMessage) async throws {
        if state.withLock({ $0.stallPublishes }) {
            let id = state.withLock { state in
                state.nextTag += 1
                return state.nextTag
            }
            do {
                try await withCancellableWait(
                    register: { continuation -> Result<Void, any Error>? in
                        state.withLock { $0.stalled[id] = continuation }
                        return nil
                    },
                    withdraw: { [self] in self.state.withLock { $0.stalled.removeValue(forKey: id) } })
            } catch {
                state.withLock { $0.publishesCancelled += 1 }
                throw error
            }
        }
        try state.withLock { state in
            if state.failPublishes { throw AMQPError(.connectionLost, "the fake broker refuses publishes") }
            state.published.append(message)
            guard message.exchange.isEmpty, message.routingKey == workQueue else { return }
            let delivery = Self.delivery(&state, body: message.body, messageID: message.properties.messageID, redelivered: false)
            if let consumer = state.consumer { consumer.yield(delivery) } else { state.ready.append(delivery) }
        }
    }
}

/// A transport that answers what the test says; with `answer == nil` every send waits until the
/// test sets one or the sending task is cancelled.
final class ScriptedTransport: NotificationTransport {
    private let state: Mutex<(answer: TransportResult?, sends: Int, waiting: Int, completed: Int)>

    init(answer: TransportResult?) {
        state = Mutex((answer, 0, 0, 0))
    }

    static let accepted = TransportResult.http(HTTPAnswer(status: 200))
    /// 403 without a reason: a provider fault, the bundle holds.
    static let providerFault = TransportResult.http(HTTPAnswer(status: 403))
    static let unregistered = TransportResult.http(HTTPAnswer(status: 410, reason: .unregistered, timestamp: 1_700_000_000_000))

    var sends: Int { state.withLock { $0.sends } }
    /// Sends waiting for an answer right now.
    var waiting: Int { state.withLock { $0.waiting } }
    /// Sends whose completion handler has returned (the pipeline's path).
    var completed: Int { state.withLock { $0.completed } }

    func answer(_ result: TransportResult?) { state.withLock { $0.answer = result } }

    func send(_ notification: PushNotification) async -> TransportResult {
        state.withLock {
            $0.sends += 1
            $0.waiting += 1
        }
        defer { state.withLock { $0.waiting -= 1 } }
        while true {
            if let answer = state.withLock({ $0.answer }) { return answer }
            if Task.isCancelled { return .failed(.shutdown) }
            // A fake's own wait, not an assertion: how soon it sees a new answer does not matter.
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    func send(_ notification: PushNotification, completion: @escaping @Sendable (TransportResult) -> Void) {
        Task {
            completion(await send(notification))
            state.withLock { $0.completed += 1 }
        }
    }
}
