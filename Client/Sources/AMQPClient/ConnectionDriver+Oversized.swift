// The owner thread copying a delivery whose body is over its consumer's limit to where the
// consumer said (its dead queue, `oversizedDeadLetter`), frame by frame as the body arrives, so
// the copy costs a frame of memory whatever the body's size (contract §4, docs/decisions.md).
// The copy goes out on a channel of its own per consumer channel (a publish's content frames
// must follow one another on their channel, and the publish channel carries other publishes
// meanwhile), in confirm mode; the delivery is handed to the consumer once the broker confirms
// the copy, marked for a plain ack, or unmarked when the copy failed.
import CRabbitMQ
import CRabbitMQShim
import Foundation
import Logging

/// One oversized delivery being copied.
struct OversizedStream {
    var consumerChannel: amqp_channel_t
    var generation: UInt64
    var streamChannel: amqp_channel_t
    /// Where the copy goes: what a `basic.return` names.
    var exchange: String
    var routingKey: String
    /// Its publish's number on the stream channel (for the broker's confirm).
    var sequence: UInt64
    /// The finished delivery (body dropped), once its last frame went out.
    var message: ContentAssembler.Message?
    /// Why the copy cannot count (the channel closed, the broker returned it): handed over unmarked.
    var failure: String?
}

/// A consumer channel's stream channel: its number and how many publishes went out on it.
struct StreamChannel {
    var channel: amqp_channel_t
    var published: UInt64 = 0
}

extension ConnectionDriver {
    /// Whether `channel` carries copies of oversized deliveries.
    func isStreamChannel(_ channel: amqp_channel_t) -> Bool {
        oversizedAwaiting[channel] != nil || streamChannels.values.contains { $0.channel == channel }
    }

    /// A header announced a body over the limit on `channel`: start its copy when the consumer
    /// asked for one. Nothing is started (the delivery is handed over unmarked, as before) when
    /// the broker blocks publishing (writing would stall this thread) or the channel cannot open.
    func beginOversizedCopy(on channel: amqp_channel_t) throws(ConnectionFailure) {
        // Only a delivery its consumer takes: one going back to the queue is not copied.
        guard let message = assembler.oversizedPending(on: channel),
            case .delivery(_, _, let consumerTag) = message.kind, self.route(consumerTag, on: channel) == .consumer,
            let route = consumers.consumer(on: channel)?.entry.request.oversizedDeadLetter
        else { return }
        try beginOversizedCopy(on: channel, route: route)
    }

    /// Starts the copy of the oversized message being assembled on `channel` (a consumer's, or
    /// the one a `basic.get` took) where `route` says.
    func beginOversizedCopy(on channel: amqp_channel_t, route: AMQPOversizedDeadLetter) throws(ConnectionFailure) {
        guard let state = conn, !blocked, let message = assembler.oversizedPending(on: channel),
            let generation = channels.generation(of: channel)
        else { return }
        let copy = route(message.properties, message.bodySize)
        var stream: StreamChannel
        if let open = streamChannels[channel] {
            stream = open
        } else {
            let number = channels.allocateConsumerChannel()
            do {
                try openChannel(number)
                _ = amqp_confirm_select(state, number)
                try check(amqp_get_rpc_reply(state), channel: number, reopen: false, context: "confirm.select")
            } catch let failure as ConnectionFailure {
                throw failure
            } catch {
                logger.warning("AMQP could not open a channel to copy an oversized message; the broker dead-letters it", metadata: ["amqp.error": "\(error)"])
                channels.closed(number)
                channels.releaseConsumerChannel(number)
                return
            }
            stream = StreamChannel(channel: number)
        }
        arena.reset()
        var method = amqp_basic_publish_t(
            ticket: 0, exchange: arena.bytes(copy.exchange), routing_key: arena.bytes(copy.routingKey), mandatory: 1, immediate: 0)
        var status = amqp_send_method(state, stream.channel, AMQPMethod.basicPublish, &method)
        if status == AMQP_STATUS_OK.rawValue {
            var properties = arena.properties(copy.properties)
            status = withUnsafeMutablePointer(to: &properties) { decoded in
                var frame = amqp_frame_t()
                frame.frame_type = UInt8(AMQP_FRAME_HEADER)
                frame.channel = stream.channel
                frame.payload.properties.class_id = UInt16(AMQP_BASIC_CLASS)
                frame.payload.properties.body_size = message.bodySize
                frame.payload.properties.decoded = UnsafeMutableRawPointer(decoded)
                return amqp_send_frame(state, &frame)
            }
        }
        arena.reset()
        guard status == AMQP_STATUS_OK.rawValue else {
            throw ConnectionFailure(error: AMQPError(.connectionLost, "copying an oversized message failed", libraryStatus: Self.statusString(status)))
        }
        stream.published += 1
        streamChannels[channel] = stream
        if oversizedAwaiting[stream.channel] == nil { oversizedAwaiting[stream.channel] = [] }
        oversizedStreaming[channel] = OversizedStream(
            consumerChannel: channel, generation: generation, streamChannel: stream.channel, exchange: copy.exchange,
            routingKey: copy.routingKey, sequence: stream.published)
    }

    /// A body frame of an oversized delivery being copied: out on the stream channel as it is.
    func copyOversizedBody(_ fragment: UnsafeRawBufferPointer, on channel: amqp_channel_t) throws(ConnectionFailure) {
        guard let stream = oversizedStreaming[channel], stream.failure == nil, let state = conn, fragment.count > 0 else { return }
        var frame = amqp_frame_t()
        frame.frame_type = UInt8(AMQP_FRAME_BODY)
        frame.channel = stream.streamChannel
        frame.payload.body_fragment = amqp_bytes_t(len: fragment.count, bytes: UnsafeMutableRawPointer(mutating: fragment.baseAddress))
        let status = amqp_send_frame(state, &frame)
        guard status == AMQP_STATUS_OK.rawValue else {
            throw ConnectionFailure(error: AMQPError(.connectionLost, "copying an oversized message failed", libraryStatus: Self.statusString(status)))
        }
    }

    /// The oversized delivery on `channel` is complete: it waits for its copy's confirm (or is
    /// handed over now, unmarked, when the copy already failed). False when no copy was made.
    func finishOversizedCopy(_ message: ContentAssembler.Message, on channel: amqp_channel_t) -> Bool {
        guard var stream = oversizedStreaming.removeValue(forKey: channel) else { return false }
        stream.message = message
        if stream.failure != nil || oversizedAwaiting[stream.streamChannel] == nil {
            hand(stream, deadLettered: false)
        } else {
            oversizedAwaiting[stream.streamChannel, default: []].append(stream)
        }
        return true
    }

    /// `basic.ack`/`basic.nack` on a stream channel: the copies it settles are handed over.
    func confirmOversizedCopies(on streamChannel: amqp_channel_t, upTo tag: UInt64, multiple: Bool, ack: Bool) {
        guard var waiting = oversizedAwaiting[streamChannel] else { return }
        let settled = waiting.filter { multiple ? $0.sequence <= tag : $0.sequence == tag }
        waiting.removeAll { multiple ? $0.sequence <= tag : $0.sequence == tag }
        oversizedAwaiting[streamChannel] = waiting
        for stream in settled {
            if !ack || stream.failure != nil {
                logger.warning(
                    "AMQP broker refused the copy of an oversized message; it dead-letters the message itself",
                    metadata: ["amqp.why": "\(stream.failure ?? "nacked")"])
            }
            hand(stream, deadLettered: ack && stream.failure == nil)
        }
    }

    /// A `basic.return` on a stream channel: the oldest copy to that exchange and routing key
    /// not yet confirmed was not routed (it has no sequence number; earlier copies may still
    /// wait for their confirm, so the oldest of all is not necessarily the one).
    func oversizedCopyReturned(on streamChannel: amqp_channel_t, exchange: String, routingKey: String, replyText: String) {
        guard
            let index = oversizedAwaiting[streamChannel]?.firstIndex(where: {
                $0.failure == nil && $0.exchange == exchange && $0.routingKey == routingKey
            })
        else { return }
        oversizedAwaiting[streamChannel]?[index].failure = "returned: \(replyText)"
    }

    /// The broker closed a stream channel: copies waiting on it are handed over unmarked, copies
    /// under way stop, and the next oversized delivery opens a new one.
    func streamChannelClosed(_ streamChannel: amqp_channel_t, why: String) {
        for (consumer, stream) in streamChannels where stream.channel == streamChannel { streamChannels[consumer] = nil }
        for (consumer, stream) in oversizedStreaming where stream.streamChannel == streamChannel {
            oversizedStreaming[consumer]?.failure = why
        }
        let waiting = oversizedAwaiting.removeValue(forKey: streamChannel) ?? []
        for var stream in waiting {
            stream.failure = why
            hand(stream, deadLettered: false)
        }
        channels.releaseConsumerChannel(streamChannel)
    }

    /// A consumer channel closes: its stream channel with it (copies confirmed after this would
    /// belong to a delivery nobody can ack; the broker delivers it again).
    func closeStreamChannel(of consumerChannel: amqp_channel_t) {
        oversizedStreaming[consumerChannel] = nil
        guard let stream = streamChannels.removeValue(forKey: consumerChannel) else { return }
        oversizedAwaiting[stream.channel] = nil
        channels.closed(stream.channel)
        if let state = conn {
            _ = amqp_channel_close(state, stream.channel, AMQP_REPLY_SUCCESS)
            amqp_maybe_release_buffers_on_channel(state, stream.channel)
        }
        channels.releaseConsumerChannel(stream.channel)
    }

    /// The connection is gone: every copy under way with it (the broker drops an unfinished
    /// publish, and delivers the original again).
    func forgetOversizedStreams() {
        oversizedStreaming.removeAll()
        oversizedAwaiting.removeAll()
        streamChannels.removeAll()
    }

    /// Hands the finished oversized delivery to its consumer, when its channel is still the one
    /// that delivered it (the get channel's to the `basic.get` waiting for it).
    private func hand(_ stream: OversizedStream, deadLettered: Bool) {
        guard var message = stream.message, channels.generation(of: stream.consumerChannel) == stream.generation else { return }
        message.oversizedCopied = deadLettered
        if stream.consumerChannel == ChannelTable.get {
            oversizedGetCopy = message
            return
        }
        deliver(message, channel: stream.consumerChannel)
    }

    /// The message a `basic.get` took on the get channel, complete, whose body was copied as it
    /// arrived: returned once the broker settled the copy, marked `oversizedCopied` when it
    /// confirmed it. Frames of every channel are handled meanwhile, as the read loop would.
    func awaitOversizedCopy(_ message: ContentAssembler.Message, on channel: amqp_channel_t) throws(ConnectionFailure) -> ContentAssembler.Message {
        oversizedGetCopy = nil
        guard finishOversizedCopy(message, on: channel) else { return message }
        while oversizedGetCopy == nil {
            guard let state = conn, channels.generation(of: channel) != nil else { break }
            var frame = amqp_frame_t()
            let status = amqp_simple_wait_frame(state, &frame)
            guard status == AMQP_STATUS_OK.rawValue else {
                throw ConnectionFailure(error: AMQPError(.connectionLost, "waiting for the copy of an oversized message failed", libraryStatus: Self.statusString(status)))
            }
            try handleFrame(&frame)
            if let state = conn { amqp_maybe_release_buffers_on_channel(state, frame.channel) }
        }
        defer { oversizedGetCopy = nil }
        return oversizedGetCopy ?? message
    }
}
