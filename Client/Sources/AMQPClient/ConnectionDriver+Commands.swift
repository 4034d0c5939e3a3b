// The owner thread carrying out its callers' commands: settlements (coalesced acks), publishes
// with confirms, consumers, RPCs, close; and the same commands answered while disconnected.
import CRabbitMQ
import CRabbitMQShim
import Foundation
import Logging

extension ConnectionDriver {
    // MARK: Commands

    func handleWhileDisconnected(_ command: Command) {
        let notConnected = AMQPError(stopRequested ? .closed : .notConnected, stopRequested ? "the connection is closed" : "not connected to the broker (reconnecting)")
        switch command {
        case .publish(_, let continuation): continuation.resume(throwing: notConnected)
        case .publishBatch(let messages, let continuation): continuation.resume(returning: Array(repeating: notConnected, count: messages.count))
        case .settle: break
        case .rpc(let request, let continuation):
            if case .declarePlan(let plan) = request, !stopRequested, reconnect.everConnected {
                // Remembered and declared with the next connection, like consumers.
                if !plans.contains(plan) { plans.append(plan) }
            }
            continuation.resume(throwing: notConnected)
        case .consume(let request, let continuation):
            if stopRequested {
                continuation.resume(throwing: notConnected)
            } else {
                consumers.add(request.id, replacementSettings(request))
                // The next connection starts the new one alone; the old one's sequence ends.
                if let old = request.replacing { consumers.remove(old)?.buffer.finish() }
                continuation.resume()
            }
        case .cancelConsumer(let id, let continuation), .releaseConsumer(let id, _, let continuation):
            consumers.remove(id)?.buffer.finish()
            continuation.resume()
        case .close(let continuation):
            stopRequested = true
            closeWaiters.append(continuation)
        }
    }

    /// `askedAt`: when the command was queued at the latest (an ack's batch delay counts from it).
    func handle(_ command: Command, askedAt: UInt64) throws(ConnectionFailure) {
        guard let state = conn else {
            handleWhileDisconnected(command)
            return
        }
        switch command {
        case .publish(let message, let continuation):
            if blocked {
                publishesWhileBlocked.append((message, .one(continuation)))
            } else {
                try send(message, .one(continuation), on: state)
            }
        case .publishBatch(let messages, let continuation):
            try sendBatch(messages, PublishBatch(count: messages.count, continuation: continuation), on: state)
        case .settle(let tag, let kind):
            // Checked again here: the channel may have died after the caller queued this.
            guard channels.isCurrent(tag) else {
                logger.debug("AMQP settlement of a stale delivery dropped", metadata: ["amqp.delivery_tag": "\(tag)"])
                return
            }
            let coalesced = tag.channel >= ChannelTable.firstConsumer
            let status: Int32
            switch kind {
            case .ack where coalesced:
                coalescing(tag.channel, tag.generation) { $0.ack(tag.value, now: askedAt) }
                return
            case .ack: status = amqp_basic_ack(state, tag.channel, tag.value, 0)
            case .nack(let requeue): status = amqp_basic_nack(state, tag.channel, tag.value, 0, requeue ? 1 : 0)
            case .reject(let requeue): status = amqp_basic_reject(state, tag.channel, tag.value, requeue ? 1 : 0)
            }
            guard status == AMQP_STATUS_OK.rawValue else {
                throw ConnectionFailure(error: AMQPError(.connectionLost, "sending an ack failed", libraryStatus: Self.statusString(status)))
            }
            if coalesced { coalescing(tag.channel, tag.generation) { $0.settledElsewhere(tag.value) } }
        case .rpc(let request, let continuation):
            do {
                continuation.resume(returning: try perform(request))
            } catch let error as AMQPError {
                continuation.resume(throwing: error)
            } catch let failure as ConnectionFailure {
                continuation.resume(throwing: failure.error)
                throw failure
            } catch {
                continuation.resume(throwing: error)
            }
        case .consume(let request, let continuation):
            consumers.add(request.id, replacementSettings(request))
            do {
                try establish(request.id)
                if let old = request.replacing { try retire(old) }
                continuation.resume()
            } catch let error as AMQPError {
                consumers.remove(request.id)
                continuation.resume(throwing: error)
            } catch let failure as ConnectionFailure {
                consumers.remove(request.id)
                continuation.resume(throwing: failure.error)
                throw failure
            } catch {
                consumers.remove(request.id)
                continuation.resume(throwing: error)
            }
        case .cancelConsumer(let id, let continuation):
            defer { continuation.resume() }
            guard let consumer = consumers.cancel(id) else { return }
            consumer.request.buffer.finish()
            if let channel = consumer.channel {
                try cancelOnBroker(state, channel, tag: consumer.request.tag)
            }
        case .releaseConsumer(let id, let handingBack, let continuation):
            defer { continuation.resume() }
            try release(id, handingBack: handingBack, on: state)
        case .close(let continuation):
            stopRequested = true
            closeWaiters.append(continuation)
        }
    }

    // MARK: Coalesced acks

    /// Sends what the coalescers of open consumer channels have ready (everything with
    /// `force`); coalescers of channels closed since are dropped, unsent: the broker has
    /// requeued their deliveries.
    func flushAcks(force: Bool = false) throws(ConnectionFailure) {
        guard !ackCoalescers.isEmpty, let state = conn else { return }
        let now = Self.monotonicNanoseconds()
        var stale: [amqp_channel_t] = []
        defer { for channel in stale { ackCoalescers[channel] = nil } }
        // A slot with nothing waiting is passed over without a look at its channel; a stale one
        // among those is dropped when its channel's next generation makes a new slot, or with
        // the connection.
        for (channel, slot) in ackCoalescers where slot.acks.waitingCount > 0 {
            guard channels.generation(of: channel) == slot.generation else {
                stale.append(channel)
                continue
            }
            let frames = slot.acks.flush(now: now, force: force)
            for frame in frames {
                let status: Int32
                switch frame {
                case .ackThrough(let tag): status = amqp_basic_ack(state, channel, tag, 1)
                case .ackOne(let tag): status = amqp_basic_ack(state, channel, tag, 0)
                }
                guard status == AMQP_STATUS_OK.rawValue else {
                    throw ConnectionFailure(error: AMQPError(.connectionLost, "sending an ack failed", libraryStatus: Self.statusString(status)))
                }
            }
        }
    }

    /// The request as the driver starts it (`replacementSettings(_:replacing:)`), with the
    /// consumer it replaces as the driver knows it now.
    func replacementSettings(_ request: ConsumerRequest) -> ConsumerRequest {
        Self.replacementSettings(request, replacing: request.replacing.flatMap { consumers.entry($0)?.request })
    }

    /// A replacing consumer has the body limit and the dead-letter route its caller passed: the
    /// caller is their one source (a reload may have changed them since `old` started, and
    /// `old` may be gone, cancelled by the broker). Only the cutting of bodies is `old`'s:
    /// `consume(replacing:…)` has no parameter for it, and a consumer of the operator listings
    /// must not start dropping the bodies it cut when its prefetch changes.
    static func replacementSettings(_ request: ConsumerRequest, replacing old: ConsumerRequest?) -> ConsumerRequest {
        guard let old else { return request }
        var request = request
        request.cutsBodies = old.cutsBodies
        return request
    }

    /// The consumer `id`, replaced on its channel by a new one: `basic.cancel` of its tag, its
    /// sequence ends after what it received, and it is forgotten. The channel stays open with
    /// the new consumer: deliveries in hand are acked there, and what the broker still sends
    /// for the old tag is handed back (`deliver`).
    func retire(_ id: Int) throws(ConnectionFailure) {
        guard let entry = consumers.entry(id) else { return }
        consumers.remove(id)
        entry.request.buffer.finish()
        guard !entry.cancelled, let channel = entry.channel, channels.generation(of: channel) != nil, let state = conn else { return }
        try cancelOnBroker(state, channel, tag: entry.request.tag)
    }

    /// The consumer `id`'s owner is done with it (`AMQPConsumer.finish(handingBack:)`): it is
    /// cancelled if it was not and forgotten, and its channel, if it still delivers on it, is
    /// closed (`handingBack`: the broker requeues what is unacked there) or kept open as a spare
    /// for the next consumer (`ChannelTable.spare`).
    func release(_ id: Int, handingBack: Bool, on state: amqp_connection_state_t) throws(ConnectionFailure) {
        guard let entry = consumers.entry(id) else { return }
        entry.request.buffer.finish()
        let owned = entry.channel.flatMap { channel in
            consumers.consumer(on: channel)?.id == id && channels.generation(of: channel) != nil ? channel : nil
        }
        if let owned, handingBack {
            closeChannel(owned)
            consumers.remove(id)
            return
        }
        if !entry.cancelled, let owned { try cancelOnBroker(state, owned, tag: entry.request.tag) }
        consumers.remove(id)
        if let owned { channels.spare(owned) }
    }

    /// `basic.cancel` of `tag` and its `cancel-ok`; a library failure is the connection's.
    private func cancelOnBroker(_ state: amqp_connection_state_t, _ channel: amqp_channel_t, tag: String) throws(ConnectionFailure) {
        _ = amqp_basic_cancel(state, channel, arena.bytes(tag))
        arena.reset()
        let reply = amqp_get_rpc_reply(state)
        if reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION {
            throw ConnectionFailure(error: AMQPError(.connectionLost, "basic.cancel failed", libraryStatus: Self.statusString(reply.library_error)))
        }
        amqp_maybe_release_buffers_on_channel(state, channel)
    }

    /// The coalescer of a consumer channel's current generation, made on first use.
    func coalescing(_ channel: amqp_channel_t, _ generation: UInt64, _ change: (inout AckCoalescer) -> Void) {
        let slot: AckCoalescerSlot
        if let current = ackCoalescers[channel], current.generation == generation {
            slot = current
        } else {
            let prefetch = consumers.consumer(on: channel)?.entry.request.prefetch
            slot = AckCoalescerSlot(generation: generation, acks: AckCoalescer(consumerPrefetch: prefetch))
            ackCoalescers[channel] = slot
        }
        change(&slot.acks)
    }

    static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    // MARK: Publishing

    func openPublishChannel() throws(ConnectionFailure) {
        try openChannel(ChannelTable.publish)
        guard let state = conn else { return }
        _ = amqp_confirm_select(state, ChannelTable.publish)
        do {
            try check(amqp_get_rpc_reply(state), channel: ChannelTable.publish, reopen: false, context: "confirm.select")
        } catch let error as AMQPError {
            throw ConnectionFailure(error: error)
        } catch let failure as ConnectionFailure {
            throw failure
        } catch {}
        confirms.restartNumbering()
    }

    /// Each message of a batch as `publish` would send it, its result kept in `batch`: a name
    /// too long for a short string refused alone (the caller's check of `publish`), the rest
    /// queued while the broker blocks publishing, or sent. When the connection fails mid-batch,
    /// the messages not sent yet fail with it.
    func sendBatch(_ messages: [AMQPOutboundMessage], _ batch: PublishBatch, on state: amqp_connection_state_t) throws(ConnectionFailure) {
        for (index, message) in messages.enumerated() {
            let waiter = PublishWaiter.batch(batch, index)
            if !AMQPShortString.fits(message.exchange) || !AMQPShortString.fits(message.routingKey) {
                waiter.settle(ShortStringNames.refusal(AMQPShortString.fits(message.exchange) ? message.routingKey : message.exchange))
            } else if blocked {
                publishesWhileBlocked.append((message, waiter))
            } else {
                do throws(ConnectionFailure) {
                    try send(message, waiter, on: state)
                } catch {
                    let unsent = AMQPError(.connectionLost, "the connection was lost before the publish was sent")
                    for rest in messages.indices.dropFirst(index + 1) { PublishWaiter.batch(batch, rest).settle(unsent) }
                    throw error
                }
            }
        }
    }

    func send(_ message: AMQPOutboundMessage, _ waiter: PublishWaiter, on state: amqp_connection_state_t) throws(ConnectionFailure) {
        arena.reset()
        var properties = arena.properties(message.properties)
        let exchange = arena.bytes(message.exchange)
        let routingKey = arena.bytes(message.routingKey)
        let status = message.body.withUnsafeBytes { body in
            amqp_basic_publish(
                state, ChannelTable.publish, exchange, routingKey, message.mandatory ? 1 : 0, 0, &properties,
                amqp_bytes_t(len: body.count, bytes: body.count == 0 ? nil : UnsafeMutableRawPointer(mutating: body.baseAddress)))
        }
        arena.reset()
        guard status == AMQP_STATUS_OK.rawValue else {
            waiter.settle(AMQPError(.connectionLost, "sending the publish failed", libraryStatus: Self.statusString(status)))
            throw ConnectionFailure(error: AMQPError(.connectionLost, "publishing failed", libraryStatus: Self.statusString(status)))
        }
        confirms.sent(
            waiter,
            returnKey: message.mandatory ? .init(exchange: message.exchange, routingKey: message.routingKey, body: message.body) : nil)
    }

    /// `basic.ack` / `basic.nack` on the confirm channel, `multiple` included.
    func confirm(upTo tag: UInt64, multiple: Bool, ack: Bool) {
        confirms.confirmed(upTo: tag, multiple: multiple, ack: ack) { waiter, error in waiter.settle(error) }
    }

    /// A `basic.return`: the publish it belongs to fails when its ack comes.
    func matchReturn(_ assembly: ContentAssembler.Message, replyCode: UInt16, replyText: String) {
        let error = AMQPError(
            .publishReturned,
            "the broker returned the message: exchange '\(assembly.exchange)' has no queue bound for routing key '\(assembly.routingKey)'",
            replyCode: replyCode, replyText: replyText, exchange: assembly.exchange)
        let key = PublishConfirms<PublishWaiter>.ReturnKey(
            exchange: assembly.exchange, routingKey: assembly.routingKey, body: assembly.body)
        guard !confirms.returned(key, error: error) else { return }
        logger.warning("AMQP basic.return matched no publish in flight", metadata: ["amqp.exchange": "\(assembly.exchange)", "amqp.routing_key": "\(assembly.routingKey)"])
    }

    func failInFlightPublishes(_ error: AMQPError) {
        confirms.failAll { $0.settle(error) }
    }
}
