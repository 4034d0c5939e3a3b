// What consumers receive: deliveries that remember which channel incarnation they came from,
// and the backpressured AsyncSequence that carries them from the owner thread to a task.
import CancellableWait
import Synchronization

/// Identifies one delivery for ack/nack/reject: the broker's delivery tag is only meaningful on
/// the channel that delivered it, so the tag carries that channel's number AND its generation
/// (every channel opened by a connection, across reconnects, gets a new generation). A tag whose
/// generation is no longer open is never sent: the broker has already requeued that message.
public struct AMQPDeliveryTag: Sendable, Hashable, CustomStringConvertible {
    public var channel: UInt16
    public var generation: UInt64
    public var value: UInt64

    public init(channel: UInt16, generation: UInt64, value: UInt64) {
        self.channel = channel
        self.generation = generation
        self.value = value
    }

    public var description: String { "\(value)@\(channel).\(generation)" }
}

/// One message received by a consumer (or by `get`), with what is needed to settle it.
public struct AMQPDelivery: Sendable, Hashable {
    public var message: AMQPDeliveredMessage
    public var tag: AMQPDeliveryTag
    /// The consumer's tag (`nil` for `basic.get`).
    public var consumerTag: String?

    public init(message: AMQPDeliveredMessage, tag: AMQPDeliveryTag, consumerTag: String?) {
        self.message = message
        self.tag = tag
        self.consumerTag = consumerTag
    }
}

/// What became of an ack, nack or reject.
public enum AMQPSettlement: Sendable, Hashable {
    /// Sent to the broker on the channel that delivered the message.
    case settled
    /// Dropped: the delivering channel is gone (reconnect, channel error, close), so the broker
    /// has requeued the message and will deliver it again. Sending the tag on a newer channel
    /// would settle some other message, so it is never sent.
    case stale
}

/// The deliveries of one consumer, in order. The sequence keeps flowing across reconnects: after
/// a reconnect the consumer is re-established on a new channel and deliveries continue (messages
/// that were unacked on the old channel come again, marked `redelivered`).
///
/// It ends (returns nil) after `cancel()` or the connection's `close()`, once the deliveries
/// already received have been consumed. It throws `AMQPError.Code.consumerCancelled` when the
/// broker cancels the consumer (its queue was deleted): the client does not guess whether the
/// queue comes back; the owner re-declares its topology and consumes again.
///
/// Backpressure: the buffer between the owner thread and the iterating task holds at most
/// `prefetch` messages, because the broker sends no more than `prefetch` unacknowledged
/// deliveries on the consumer's channel; a slow consumer therefore slows the broker, not memory.
/// One task iterates a consumer (single-consumer sequence).
public struct AMQPConsumer: AsyncSequence, Sendable {
    public typealias Element = AMQPDelivery

    public let queue: String
    public let consumerTag: String
    let id: Int
    let buffer: DeliveryBuffer
    let connection: AMQPConnection

    /// Stops deliveries (`basic.cancel`) but keeps the channel open, so deliveries in hand can
    /// still be acked; the sequence ends after the deliveries already buffered.
    public func cancel() async {
        await connection.cancelConsumer(id: id)
    }

    /// Its owner is done with it: cancelled if it was not, and its channel given back. Without
    /// `handingBack` every delivery it handed out must be settled: the channel stays open for
    /// the connection's next consumer (closing it could apply acks just sent after the close
    /// and deliver their jobs again). With `handingBack` (jobs abandoned at a shutdown deadline)
    /// the channel closes, and the broker requeues what is still unacked on it now rather
    /// than when the connection ends.
    public func finish(handingBack: Bool) async {
        await connection.releaseConsumer(id: id, handingBack: handingBack)
    }

    public func makeAsyncIterator() -> Iterator { Iterator(buffer: buffer) }

    public struct Iterator: AsyncIteratorProtocol, Sendable {
        let buffer: DeliveryBuffer
        public mutating func next() async throws -> AMQPDelivery? {
            try await buffer.next()
        }
    }
}

/// A single-consumer queue from the owner thread (which must never block) to one task.
/// Its size is bounded by the consumer's prefetch (see `AMQPConsumer`). Public so that the
/// tests' in-memory broker hands out deliveries the way the real consumer does (its iterator
/// is `Sendable`, and a cancelled wait leaves the buffer as it was).
public final class DeliveryBuffer: Sendable {
    private struct State {
        var items: [AMQPDelivery] = []
        var head = 0
        var waiter: CheckedContinuation<AMQPDelivery?, any Error>?
        /// Set once: nil error = normal end.
        var finished = false
        var failure: AMQPError?

        mutating func popFirst() -> AMQPDelivery? {
            guard head < items.count else { return nil }
            let item = items[head]
            head += 1
            if head == items.count {
                items.removeAll(keepingCapacity: true)
                head = 0
            }
            return item
        }
    }

    private let state = Mutex(State())

    public init() {}

    /// Called by the owner thread; never blocks.
    /// False when the sequence has finished: nobody will ever settle the delivery, so the
    /// caller must hand it back to the broker itself.
    @discardableResult
    public func push(_ delivery: AMQPDelivery) -> Bool {
        let (accepted, waiter): (Bool, CheckedContinuation<AMQPDelivery?, any Error>?) = state.withLock { state in
            guard !state.finished else { return (false, nil) }
            if let waiter = state.waiter {
                state.waiter = nil
                return (true, waiter)
            }
            state.items.append(delivery)
            return (true, nil)
        }
        waiter?.resume(returning: delivery)
        return accepted
    }

    /// Ends the sequence after the buffered deliveries; with an error, that error is thrown
    /// once they have been consumed.
    public func finish(throwing error: AMQPError? = nil) {
        let waiter: CheckedContinuation<AMQPDelivery?, any Error>? = state.withLock { state in
            guard !state.finished else { return nil }
            state.finished = true
            state.failure = error
            defer { state.waiter = nil }
            return state.waiter
        }
        if let waiter {
            if let error { waiter.resume(throwing: error) } else { waiter.resume(returning: nil) }
        }
    }

    private enum Next {
        case item(AMQPDelivery)
        case end(AMQPError?)
        case wait
    }

    public func next() async throws -> AMQPDelivery? {
        // Fast path without a continuation while the broker keeps the buffer non-empty.
        let immediate: Next = state.withLock { state in
            if let item = state.popFirst() { return .item(item) }
            if state.finished {
                defer { state.failure = nil }
                return .end(state.failure)
            }
            return .wait
        }
        switch immediate {
        case .item(let item): return item
        case .end(let error):
            if let error { throw error }
            return nil
        case .wait: break
        }
        // A cancelled task's sequence ends (nil), as `AsyncSequence` iterators do.
        return try await withCancellableWait(
            register: { continuation -> Result<AMQPDelivery?, any Error>? in
                state.withLock { state in
                    if let item = state.popFirst() { return .success(item) }
                    if state.finished {
                        defer { state.failure = nil }
                        return state.failure.map { .failure($0) } ?? .success(nil)
                    }
                    state.waiter = continuation
                    return nil
                }
            },
            withdraw: {
                state.withLock { state in
                    defer { state.waiter = nil }
                    return state.waiter
                }
            },
            cancelled: .success(nil))
    }
}
