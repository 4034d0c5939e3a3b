// The owner thread's RPCs on the control channel (topology declarations, deletes, purges) and
// basic.get on its own (`ChannelTable.get`), and turning an RPC reply into success, a channel
// error or a connection failure.
import CRabbitMQ
import CRabbitMQShim
import Foundation
import Logging

extension ConnectionDriver {
    // MARK: RPCs on the control channel

    func perform(_ request: RPCRequest) throws -> RPCResult {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        let channel = ChannelTable.control
        defer {
            arena.reset()
            if conn != nil { amqp_maybe_release_buffers_on_channel(state, channel) }
        }
        switch request {
        case .declarePlan(let plan):
            try declareAll(plan)
            if !plans.contains(plan) { plans.append(plan) }
            return .done
        case .declareExchange(let exchange):
            try declare(exchange)
            return .done
        case .declareQueue(let queue):
            return .queueInfo(try declare(queue))
        case .bind(let binding):
            try bind(binding)
            return .done
        case .deleteQueue(let name, let ifUnused, let ifEmpty):
            let ok = amqp_queue_delete(state, channel, arena.bytes(name), ifUnused ? 1 : 0, ifEmpty ? 1 : 0)
            try check(amqp_get_rpc_reply(state), channel: channel, reopen: true, context: "deleting queue '\(name)'", queue: name)
            return .count(ok?.pointee.message_count ?? 0)
        case .deleteExchange(let name, let ifUnused):
            _ = amqp_exchange_delete(state, channel, arena.bytes(name), ifUnused ? 1 : 0)
            try check(amqp_get_rpc_reply(state), channel: channel, reopen: true, context: "deleting exchange '\(name)'", exchange: name)
            return .done
        case .purgeQueue(let name):
            let ok = amqp_queue_purge(state, channel, arena.bytes(name))
            try check(amqp_get_rpc_reply(state), channel: channel, reopen: true, context: "purging queue '\(name)'", queue: name)
            return .count(ok?.pointee.message_count ?? 0)
        case .inspectQueue(let name):
            return .queueInfo(try inspect(name, context: "inspecting queue '\(name)'"))
        case .get(let queue, let maxBodySize, let oversizedDeadLetter):
            return .delivery(try get(queue, maxBodySize: maxBodySize, oversizedDeadLetter: oversizedDeadLetter))
        }
    }

    func declareAll(_ plan: TopologyPlan) throws {
        for exchange in plan.exchanges { try declare(exchange) }
        for queue in plan.queues { try declare(queue) }
        for binding in plan.bindings { try bind(binding) }
    }

    func declare(_ exchange: ExchangeDeclaration) throws {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        defer { arena.reset() }
        _ = amqp_exchange_declare(
            state, ChannelTable.control, arena.bytes(exchange.name), arena.bytes(exchange.kind.rawValue),
            0, exchange.durable ? 1 : 0, 0, 0, arena.table(exchange.arguments))
        try check(amqp_get_rpc_reply(state), channel: ChannelTable.control, reopen: true, context: "declaring exchange '\(exchange.name)'", exchange: exchange.name)
        amqp_maybe_release_buffers_on_channel(state, ChannelTable.control)
    }

    @discardableResult
    func declare(_ queue: QueueDeclaration) throws -> AMQPQueueInfo {
        do {
            return try declare(queue, passive: false)
        } catch let error as AMQPError
            where error.code == .declarationConflict && error.argument.map(queue.lenientArguments.contains) == true
        {
            logger.warning(
                "queue exists with another value of a lenient argument; taken as it is (a policy can set it)",
                metadata: ["amqp.queue": "\(queue.name)", "amqp.argument": "\(error.argument ?? "")", "amqp.reply": "\(error.replyText ?? "")"])
            return try declare(queue, passive: true)
        }
    }

    /// `queue.declare` on the control channel; `passive` only looks the queue up (its flags and
    /// arguments are not sent). A refusal (404, 405 locked, 406) is a channel error named by
    /// `context`, the control channel opened again.
    private func declare(_ queue: QueueDeclaration, passive: Bool, context: String? = nil) throws -> AMQPQueueInfo {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        defer { arena.reset() }
        // passive, durable, exclusive, auto-delete: an exclusive queue is neither durable nor kept.
        let ok = amqp_queue_declare(
            state, ChannelTable.control, arena.bytes(queue.name), passive ? 1 : 0, queue.exclusive ? 0 : 1, queue.exclusive ? 1 : 0,
            queue.exclusive ? 1 : 0, passive ? amqp_table_t(num_entries: 0, entries: nil) : arena.table(queue.arguments))
        try check(
            amqp_get_rpc_reply(state), channel: ChannelTable.control, reopen: true, context: context ?? "declaring queue '\(queue.name)'",
            queue: queue.name)
        guard let ok else { throw AMQPError(.library, "queue.declare-ok missing") }
        let info = AMQPQueueInfo(name: queue.name, messageCount: ok.pointee.message_count, consumerCount: ok.pointee.consumer_count)
        amqp_maybe_release_buffers_on_channel(state, ChannelTable.control)
        return info
    }

    /// A passive declare: the counts of an existing queue, else the broker's refusal.
    func inspect(_ name: String, context: String) throws -> AMQPQueueInfo {
        try declare(QueueDeclaration(name: name), passive: true, context: context)
    }

    func bind(_ binding: BindingDeclaration) throws {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        defer { arena.reset() }
        _ = amqp_queue_bind(
            state, ChannelTable.control, arena.bytes(binding.queue), arena.bytes(binding.exchange), arena.bytes(binding.routingKey),
            amqp_table_t(num_entries: 0, entries: nil))
        try check(amqp_get_rpc_reply(state), channel: ChannelTable.control, reopen: true,
                  context: "binding queue '\(binding.queue)' to exchange '\(binding.exchange)' with key '\(binding.routingKey)'",
                  queue: binding.queue, exchange: binding.exchange)
        amqp_maybe_release_buffers_on_channel(state, ChannelTable.control)
    }

    /// `basic.get`, its message put together frame by frame as a consumer's is (`ContentAssembler`,
    /// `assembleHeader`): a body over `maxBodySize` is read and not kept (it used to be read whole
    /// into memory, whatever its size, by `amqp_read_message`: one large message in a held bundle's
    /// queue, and its probe took that much memory), properties keep the bounds and the received
    /// header table's bytes of a consumer's delivery.
    ///
    /// The queue is looked up first, on the control channel: a get the broker refuses (no such
    /// queue, locked) closes the get channel, and a closing channel hands back every delivery
    /// not yet acked on it: another held bundle's probe out at that moment would come back
    /// beside the copy that probe publishes (sent twice, as the control channel did before it
    /// had `ChannelTable.get`). A refused look-up takes nothing with it.
    ///
    /// With `oversizedDeadLetter`, a body over `maxBodySize` is copied there as it arrives, as a
    /// consumer's (`ConnectionDriver+Oversized.swift`), and the get waits for the broker's confirm
    /// of the copy before it returns the message, marked `oversizedCopied` when it came.
    func get(_ queue: String, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter? = nil) throws -> AMQPDelivery? {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        _ = try inspect(queue, context: "basic.get on queue '\(queue)'")
        let channel = ChannelTable.get
        defer { if conn != nil { amqp_maybe_release_buffers_on_channel(state, channel) } }
        let reply = amqp_basic_get(state, channel, arena.bytes(queue), 0)
        arena.reset()
        try check(reply, channel: channel, reopen: true, context: "basic.get on queue '\(queue)'", queue: queue)
        guard reply.reply.id == AMQPMethod.basicGetOk, let decoded = reply.reply.decoded else { return nil }
        let ok = decoded.assumingMemoryBound(to: amqp_basic_get_ok_t.self).pointee
        let deliveryTag = ok.delivery_tag
        let redelivered = ok.redelivered != 0
        assembler.begin(
            .delivery(tag: deliveryTag, redelivered: redelivered, consumerTag: ""), exchange: FieldDecoder.string(ok.exchange),
            routingKey: FieldDecoder.string(ok.routing_key), bodyLimit: maxBodySize, on: channel)
        // librabbitmq waits for one channel's frames only in private functions: every frame is
        // read here, and those of other channels are handled as the read loop would have, in
        // the order they came.
        var assembled: ContentAssembler.Message?
        while assembled == nil, assembler.isAssembling(on: channel) {
            guard let state = conn else { throw ConnectionFailure(error: AMQPError(.connectionLost, "the connection closed during basic.get")) }
            var frame = amqp_frame_t()
            let status = amqp_simple_wait_frame(state, &frame)
            guard status == AMQP_STATUS_OK.rawValue else {
                assembler.discard(channel: channel)
                throw ConnectionFailure(error: AMQPError(.connectionLost, "reading the message of basic.get failed", libraryStatus: Self.statusString(status)))
            }
            switch (frame.channel == channel, Int32(frame.frame_type)) {
            case (true, AMQP_FRAME_HEADER):
                let header = frame.payload.properties
                assembled = assembleHeader(on: channel, bodySize: header.body_size, decoded: header.decoded, raw: header.raw)
                if assembled == nil, let oversizedDeadLetter { try beginOversizedCopy(on: channel, route: oversizedDeadLetter) }
            case (true, AMQP_FRAME_BODY):
                let bytes = Self.bytes(of: frame.payload.body_fragment)
                if oversizedStreaming[channel] != nil { try copyOversizedBody(bytes, on: channel) }
                assembled = assembler.body(on: channel, bytes)
            case (true, _):
                // A method on the get channel mid-message (its close): the message goes back to
                // the queue with the channel.
                assembler.discard(channel: channel)
                try handleFrame(&frame)
            default:
                try handleFrame(&frame)
            }
            // Each frame's page is given back once it is handled, as the read loop does: kept to
            // the end, a large body's frames would all be held at once in librabbitmq's pool.
            if let state = conn { amqp_maybe_release_buffers_on_channel(state, frame.channel) }
        }
        guard var assembled else { return nil }
        if oversizedStreaming[channel] != nil { assembled = try awaitOversizedCopy(assembled, on: channel) }
        guard let generation = channels.generation(of: channel) else { return nil }
        return AMQPDelivery(
            message: Self.deliveredMessage(assembled, redelivered: redelivered),
            tag: AMQPDeliveryTag(channel: channel, generation: generation, value: deliveryTag), consumerTag: nil)
    }

    /// Turns an RPC reply into success, a channel-level `AMQPError` (after answering the
    /// broker's channel.close and, with `reopen`, opening the channel again), or a
    /// `ConnectionFailure`.
    func check(
        _ reply: amqp_rpc_reply_t, channel: amqp_channel_t, reopen: Bool, context: String,
        queue: String? = nil, exchange: String? = nil
    ) throws {
        switch reply.reply_type {
        case AMQP_RESPONSE_NORMAL:
            return
        case AMQP_RESPONSE_SERVER_EXCEPTION:
            let (code, text) = Self.closeReason(reply.reply)
            if reply.reply.id == AMQPMethod.connectionClose {
                if let state = conn {
                    var ok = amqp_connection_close_ok_t(dummy: 0)
                    _ = amqp_send_method(state, 0, AMQPMethod.connectionCloseOk, &ok)
                }
                throw ConnectionFailure(error: AMQPError(.connectionClosedByServer, "\(context): the broker closed the connection", replyCode: code, replyText: text, queue: queue, exchange: exchange))
            }
            if let state = conn {
                var ok = amqp_channel_close_ok_t(dummy: 0)
                _ = amqp_send_method(state, channel, AMQPMethod.channelCloseOk, &ok)
                amqp_maybe_release_buffers_on_channel(state, channel)
            }
            channels.closed(channel)
            if reopen {
                if channel == ChannelTable.publish { try openPublishChannel() } else { try openChannel(channel) }
            }
            if code == 406, let argument = AMQPError.inequivalentArgument(in: text) {
                let subject = queue.map { "queue '\($0)'" } ?? exchange.map { "exchange '\($0)'" } ?? "the entity"
                throw AMQPError(
                    .declarationConflict,
                    "\(context): \(subject) already exists with a different '\(argument)'; delete it or change the configuration to match",
                    replyCode: code, replyText: text, queue: queue, exchange: exchange, argument: argument)
            }
            throw AMQPError(.channelClosed, "\(context) failed", replyCode: code, replyText: text, queue: queue, exchange: exchange)
        default:
            let status = reply.library_error
            throw ConnectionFailure(error: AMQPError(.connectionLost, "\(context): the connection failed", libraryStatus: Self.statusString(status), queue: queue, exchange: exchange))
        }
    }

    // MARK: Helpers

    static func closeReason(_ method: amqp_method_t) -> (UInt16, String) {
        guard let decoded = method.decoded else { return (0, "") }
        switch method.id {
        case AMQPMethod.connectionClose:
            let m = decoded.assumingMemoryBound(to: amqp_connection_close_t.self).pointee
            return (m.reply_code, FieldDecoder.string(m.reply_text))
        case AMQPMethod.channelClose:
            let m = decoded.assumingMemoryBound(to: amqp_channel_close_t.self).pointee
            return (m.reply_code, FieldDecoder.string(m.reply_text))
        default:
            return (0, "unexpected method 0x\(String(method.id, radix: 16))")
        }
    }

    /// Why verification refused the broker, in the operator's terms; empty for other failures.
    static func tlsVerificationFailure(_ status: Int32, url: AMQPURL, tls: AMQPTLSConfiguration) -> String {
        switch status {
        case AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED.rawValue:
            ": the broker's TLS certificate is not for the host name '\(url.host)' (use a name the certificate lists in the url)"
        case AMQP_STATUS_SSL_PEER_VERIFY_FAILED.rawValue:
            ": the broker's TLS certificate is not trusted (not signed by a CA in \(tls.caFile ?? AMQPTLSConfiguration.systemBundle); see [amqp] caFile)"
        default:
            ""
        }
    }

    static func statusString(_ status: Int32) -> String {
        guard let text = amqp_error_string2(status) else { return "status \(status)" }
        return String(cString: text)
    }

    static func timeout(_ duration: Duration) -> timeval {
        let ms = duration.wholeMilliseconds
        return timeval(tv_sec: Int(ms / 1000), tv_usec: Int((ms % 1000) * 1000))
    }
}
