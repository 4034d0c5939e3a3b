// The owner thread reading the broker: frames assembled into deliveries and returns, confirms,
// cancellations and closes; and the channels it opens and closes.
import CRabbitMQ
import CRabbitMQShim
import Foundation
import Logging

extension ConnectionDriver {
    // MARK: Frames

    func handleFrame(_ frame: inout amqp_frame_t) throws(ConnectionFailure) {
        let channel = frame.channel
        switch Int32(frame.frame_type) {
        case AMQP_FRAME_METHOD:
            try handleMethod(frame.payload.method, channel: channel)
        case AMQP_FRAME_HEADER:
            let header = frame.payload.properties
            if let message = assembleHeader(on: channel, bodySize: header.body_size, decoded: header.decoded, raw: header.raw) {
                complete(message, channel: channel)
            } else {
                try beginOversizedCopy(on: channel)
            }
        case AMQP_FRAME_BODY:
            let fragment = frame.payload.body_fragment
            let bytes = Self.bytes(of: fragment)
            if !oversizedStreaming.isEmpty { try copyOversizedBody(bytes, on: channel) }
            if let message = assembler.body(on: channel, bytes) {
                complete(message, channel: channel)
            }
        default:
            break
        }
    }

    /// A header frame for the message assembled on `channel`: the finished message when it has no
    /// body. Properties are never split over frames: the broker sends them as large as its own
    /// frame_max allows (128 KiB by default). Over the contract's 16 KiB the message is malformed,
    /// and its header table is not copied out of librabbitmq's page. A header table nested too
    /// deep is malformed too (librabbitmq has decoded it, on a stack sized for that,
    /// `AMQPConnection.ownerThreadStackSize`; Swift never recurses through more than
    /// `AMQPProperties.maximumHeaderDepth` levels).
    func assembleHeader(
        on channel: amqp_channel_t, bodySize: UInt64, decoded: UnsafeMutableRawPointer?, raw: amqp_bytes_t
    ) -> ContentAssembler.Message? {
        let propertiesSize = raw.len
        let keepHeaders = propertiesSize <= AMQPProperties.maximumEncodedSize
        let tooDeep = keepHeaders && decoded.map {
            FieldDecoder.headersNestTooDeep($0.assumingMemoryBound(to: amqp_basic_properties_t.self).pointee)
        } ?? false
        return assembler.header(
            on: channel, bodySize: bodySize, oversizedPropertiesSize: keepHeaders ? nil : propertiesSize, headersNestedTooDeep: tooDeep
        ) {
            decoded.map {
                FieldDecoder.properties(
                    $0.assumingMemoryBound(to: amqp_basic_properties_t.self).pointee, keepHeaders: keepHeaders && !tooDeep,
                    encoded: UnsafeRawBufferPointer(start: raw.bytes, count: raw.len)
                ) {
                    repeatedStrings.shortString($0, .contentType, channel: channel)
                }
            }
        }
    }

    /// A body frame's bytes in librabbitmq's page, read in place (an empty frame may carry no
    /// pointer).
    static func bytes(of fragment: amqp_bytes_t) -> UnsafeRawBufferPointer {
        fragment.len > 0 ? UnsafeRawBufferPointer(start: fragment.bytes, count: fragment.len) : UnsafeRawBufferPointer(start: nil, count: 0)
    }

    /// A finished assembly as the message a consumer or `basic.get` hands out.
    static func deliveredMessage(_ assembly: ContentAssembler.Message, redelivered: Bool) -> AMQPDeliveredMessage {
        var message = AMQPDeliveredMessage(
            exchange: assembly.exchange, routingKey: assembly.routingKey, redelivered: redelivered,
            body: assembly.body, properties: assembly.properties, oversizedBodySize: assembly.oversized ? assembly.bodySize : nil,
            oversizedPropertiesSize: assembly.oversizedPropertiesSize)
        if assembly.oversizedCopied { message.oversizedBodyDeadLettered = true }
        if assembly.headersNestedTooDeep { message.headersNestedTooDeep = true }
        return message
    }

    func handleMethod(_ method: amqp_method_t, channel: amqp_channel_t) throws(ConnectionFailure) {
        guard let decoded = method.decoded else { return }
        switch method.id {
        case AMQPMethod.basicDeliver:
            let m = decoded.assumingMemoryBound(to: amqp_basic_deliver_t.self).pointee
            let consumerTag = repeatedStrings.string(m.consumer_tag, .consumerTag, channel: channel)
            // One look-up for the route and both limits: each copies the consumer's entry out of
            // the registry. A delivery no consumer of ours will take keeps no body (nor is it
            // copied: `beginOversizedCopy`); it goes back when complete (`deliver`).
            let found = consumers.consumer(on: channel)?.entry
            let taker = route(consumerTag, on: channel, entry: found) == .consumer ? found?.request : nil
            assembler.begin(
                .delivery(tag: m.delivery_tag, redelivered: m.redelivered != 0, consumerTag: consumerTag),
                exchange: repeatedStrings.string(m.exchange, .exchange, channel: channel),
                routingKey: repeatedStrings.string(m.routing_key, .routingKey, channel: channel),
                bodyLimit: taker?.maxBodySize ?? 0, keepsPrefix: taker?.cutsBodies ?? false, on: channel)
        case AMQPMethod.basicReturn:
            let m = decoded.assumingMemoryBound(to: amqp_basic_return_t.self).pointee
            // A copy of an oversized message comes back with its body: not kept.
            assembler.begin(
                .returned(replyCode: m.reply_code, replyText: FieldDecoder.string(m.reply_text)),
                exchange: FieldDecoder.string(m.exchange), routingKey: FieldDecoder.string(m.routing_key),
                bodyLimit: isStreamChannel(channel) ? 0 : .max, on: channel)
        case AMQPMethod.basicAck where channel == ChannelTable.publish:
            let m = decoded.assumingMemoryBound(to: amqp_basic_ack_t.self).pointee
            confirm(upTo: m.delivery_tag, multiple: m.multiple != 0, ack: true)
        case AMQPMethod.basicNack where channel == ChannelTable.publish:
            let m = decoded.assumingMemoryBound(to: amqp_basic_nack_t.self).pointee
            confirm(upTo: m.delivery_tag, multiple: m.multiple != 0, ack: false)
        case AMQPMethod.basicAck where isStreamChannel(channel):
            let m = decoded.assumingMemoryBound(to: amqp_basic_ack_t.self).pointee
            confirmOversizedCopies(on: channel, upTo: m.delivery_tag, multiple: m.multiple != 0, ack: true)
        case AMQPMethod.basicNack where isStreamChannel(channel):
            let m = decoded.assumingMemoryBound(to: amqp_basic_nack_t.self).pointee
            confirmOversizedCopies(on: channel, upTo: m.delivery_tag, multiple: m.multiple != 0, ack: false)
        case AMQPMethod.basicCancel:
            let m = decoded.assumingMemoryBound(to: amqp_basic_cancel_t.self).pointee
            try consumerCancelledByBroker(channel: channel, tag: FieldDecoder.string(m.consumer_tag))
        case AMQPMethod.channelClose:
            let m = decoded.assumingMemoryBound(to: amqp_channel_close_t.self).pointee
            try channelClosedByBroker(channel, replyCode: m.reply_code, replyText: FieldDecoder.string(m.reply_text))
        case AMQPMethod.connectionClose:
            let m = decoded.assumingMemoryBound(to: amqp_connection_close_t.self).pointee
            let text = FieldDecoder.string(m.reply_text)
            if let state = conn {
                var ok = amqp_connection_close_ok_t(dummy: 0)
                _ = amqp_send_method(state, 0, AMQPMethod.connectionCloseOk, &ok)
            }
            throw ConnectionFailure(error: AMQPError(.connectionClosedByServer, "the broker closed the connection", replyCode: m.reply_code, replyText: text))
        case AMQPMethod.connectionBlocked:
            let m = decoded.assumingMemoryBound(to: amqp_connection_blocked_t.self).pointee
            blocked = true
            setState(.blocked)
            logger.warning("AMQP broker blocked publishing", metadata: ["amqp.reason": "\(FieldDecoder.string(m.reason))"])
        case AMQPMethod.connectionUnblocked:
            blocked = false
            setState(.connected)
            logger.info("AMQP broker unblocked publishing")
            guard let state = conn else { return }
            while !publishesWhileBlocked.isEmpty {
                let (message, waiter) = publishesWhileBlocked.removeFirst()
                // On failure the rest stay queued; teardown fails them.
                try send(message, waiter, on: state)
            }
        default:
            break
        }
    }

    func complete(_ assembly: ContentAssembler.Message, channel: amqp_channel_t) {
        switch assembly.kind {
        case .delivery:
            if assembly.oversized && finishOversizedCopy(assembly, on: channel) { return }
            deliver(assembly, channel: channel)
        case .returned(let replyCode, let replyText):
            if isStreamChannel(channel) {
                oversizedCopyReturned(on: channel, exchange: assembly.exchange, routingKey: assembly.routingKey, replyText: replyText)
            } else {
                matchReturn(assembly, replyCode: replyCode, replyText: replyText)
            }
        }
    }

    /// `DeliveryRoute` for a delivery carrying `consumerTag` on `channel`, as things stand now.
    func route(_ consumerTag: String, on channel: amqp_channel_t) -> DeliveryRoute {
        route(consumerTag, on: channel, entry: consumers.consumer(on: channel)?.entry)
    }

    /// The same, with the channel's consumer (`entry`) already looked up by the caller.
    func route(_ consumerTag: String, on channel: amqp_channel_t, entry: ConsumerRegistry<ConsumerRequest>.Entry?) -> DeliveryRoute {
        let consumer = entry.map { (tag: $0.request.tag, cancelled: $0.cancelled) }
        return DeliveryRoute.of(consumerTag: consumerTag, channelOpen: channels.generation(of: channel) != nil, consumer: consumer)
    }

    /// Hands a finished delivery to its consumer, or back to the broker (`DeliveryRoute`).
    func deliver(_ assembly: ContentAssembler.Message, channel: amqp_channel_t) {
        switch assembly.kind {
        case .returned:
            return
        case .delivery(let tag, let redelivered, let consumerTag):
            let found = consumers.consumer(on: channel)?.entry
            let route = self.route(consumerTag, on: channel, entry: found)
            guard route != .drop, let generation = channels.generation(of: channel) else { return }
            let consumer = route == .consumer ? found : nil
            let message = Self.deliveredMessage(assembly, redelivered: redelivered)
            // Not for the channel's consumer (a tag it replaced, `retire`, or none of ours), or its
            // sequence has ended: back like one after a cancel.
            let accepted = consumer?.request.buffer.push(AMQPDelivery(
                message: message, tag: AMQPDeliveryTag(channel: channel, generation: generation, value: tag), consumerTag: consumerTag)) ?? false
            if accepted {
                let now = Self.monotonicNanoseconds()
                coalescing(channel, generation) { $0.delivered(tag, now: now) }
            } else if let state = conn {
                // For a consumer cancelled or replaced (a quorum queue sends deliveries even after
                // `basic.cancel-ok`): the consumer's sequence has ended, so nobody would ever
                // settle it and it would sit unacked on this still-open channel until the
                // connection closed. Hand it back now. Counted as delivered too, so the
                // coalescer's prefix passes over it.
                _ = amqp_basic_reject(state, channel, tag, 1)
                let now = Self.monotonicNanoseconds()
                coalescing(channel, generation) {
                    $0.delivered(tag, now: now)
                    $0.settledElsewhere(tag)
                }
            }
        }
    }

    func consumerCancelledByBroker(channel: amqp_channel_t, tag: String) throws(ConnectionFailure) {
        guard let (id, consumer) = consumers.consumer(on: channel) else { return }
        logger.warning("AMQP broker cancelled a consumer (queue deleted?)", metadata: ["amqp.queue": "\(consumer.request.queue)", "amqp.consumer_tag": "\(tag)"])
        consumers.remove(id)
        consumer.request.buffer.finish(throwing: AMQPError(
            .consumerCancelled, "the broker cancelled the consumer of queue '\(consumer.request.queue)' (the queue was deleted or its node went down)",
            queue: consumer.request.queue))
        closeChannel(channel)
    }

    /// A channel exception on a channel we did not wait on synchronously: answer close-ok,
    /// then repair what used the channel.
    func channelClosedByBroker(_ channel: amqp_channel_t, replyCode: UInt16, replyText: String) throws(ConnectionFailure) {
        guard let state = conn else { return }
        var ok = amqp_channel_close_ok_t(dummy: 0)
        _ = amqp_send_method(state, channel, AMQPMethod.channelCloseOk, &ok)
        channels.closed(channel)
        assembler.discard(channel: channel)
        logger.warning("AMQP broker closed a channel", metadata: ["amqp.channel": "\(channel)", "amqp.reply_code": "\(replyCode)", "amqp.reply_text": "\(replyText)"])
        if channel == ChannelTable.publish {
            failInFlightPublishes(AMQPError(.channelClosed, "the broker closed the publishing channel", replyCode: replyCode, replyText: replyText))
            try openPublishChannel()
        } else if channel == ChannelTable.control || channel == ChannelTable.get {
            try openChannel(channel)
        } else if isStreamChannel(channel) {
            streamChannelClosed(channel, why: "the broker closed the channel: \(replyCode) \(replyText)")
        } else if let (id, consumer) = consumers.channelClosed(channel) {
            closeStreamChannel(of: channel)
            channels.releaseConsumerChannel(channel)
            guard !consumer.cancelled else { return }
            do {
                try establish(id)
            } catch let error as AMQPError {
                consumers.remove(id)
                consumer.request.buffer.finish(throwing: error)
            } catch let failure as ConnectionFailure {
                throw failure
            } catch {}
        }
    }

    // MARK: Channels

    func openChannel(_ channel: amqp_channel_t) throws(ConnectionFailure) {
        guard let state = conn else { throw ConnectionFailure(error: AMQPError(.notConnected, "not connected")) }
        _ = amqp_channel_open(state, channel)
        let reply = amqp_get_rpc_reply(state)
        do {
            try check(reply, channel: channel, reopen: false, context: "channel.open")
        } catch let error as AMQPError {
            throw ConnectionFailure(error: error)
        } catch let failure as ConnectionFailure {
            throw failure
        } catch {}
        amqp_maybe_release_buffers_on_channel(state, channel)
        channels.opened(channel)
    }

    func closeChannel(_ channel: amqp_channel_t) {
        closeStreamChannel(of: channel)
        channels.closed(channel)
        assembler.discard(channel: channel)
        _ = consumers.channelClosed(channel)
        if let state = conn {
            _ = amqp_channel_close(state, channel, AMQP_REPLY_SUCCESS)
            amqp_maybe_release_buffers_on_channel(state, channel)
        }
        channels.releaseConsumerChannel(channel)
    }

    /// Opens a channel for the consumer (or takes the one of the consumer it replaces, still
    /// open, or a spare one a released consumer left), sets its prefetch and starts `basic.consume`.
    func establish(_ id: Int) throws {
        guard let state = conn, let consumer = consumers.entry(id) else { return }
        let request = consumer.request
        let shared = request.replacing.flatMap { consumers.entry($0)?.channel }.flatMap { channels.generation(of: $0) == nil ? nil : $0 }
        let reused = shared ?? channels.takeSpare()
        let channel = reused ?? channels.allocateConsumerChannel()
        if reused == nil { try openChannel(channel) }
        do {
            _ = amqp_basic_qos(state, channel, 0, request.prefetch, 0)
            try check(amqp_get_rpc_reply(state), channel: channel, reopen: false, context: "basic.qos on queue '\(request.queue)'")
            arena.reset()
            _ = amqp_basic_consume(state, channel, arena.bytes(request.queue), arena.bytes(request.tag), 0, 0, 0, amqp_table_t(num_entries: 0, entries: nil))
            arena.reset()
            try check(amqp_get_rpc_reply(state), channel: channel, reopen: false, context: "consuming queue '\(request.queue)'", queue: request.queue)
        } catch {
            // The broker closed the channel (`check`): a shared one takes the replaced consumer
            // with it, whose sequence ends when the caller cancels it.
            if reused != nil {
                closeStreamChannel(of: channel)
                assembler.discard(channel: channel)
                _ = consumers.channelClosed(channel)
            }
            channels.closed(channel)
            channels.releaseConsumerChannel(channel)
            throw error
        }
        amqp_maybe_release_buffers_on_channel(state, channel)
        if reused != nil, let slot = ackCoalescers[channel], slot.generation == channels.generation(of: channel) {
            slot.acks.resize(forPrefetch: request.prefetch)
        }
        consumers.started(id, on: channel)
        logger.debug("AMQP consumer started", metadata: ["amqp.queue": "\(request.queue)", "amqp.channel": "\(channel)", "amqp.prefetch": "\(request.prefetch)"])
    }
}
