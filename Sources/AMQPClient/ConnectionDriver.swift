// The owner thread of one AMQP connection: the only code that touches librabbitmq state.
// It connects (failover + backoff), restores topology and consumers, then loops: carry out
// queued commands, read every available frame, sleep in poll(2) on socket + eventfd.
import APNSCore
import CRabbitMQ
import CRabbitMQShim
import Foundation
import Logging
import Synchronization

/// Protocol constants librabbitmq defines as casted macros, which Swift does not import.
enum AMQPMethod {
    static let connectionClose: amqp_method_number_t = 0x000A_0032
    static let connectionCloseOk: amqp_method_number_t = 0x000A_0033
    static let connectionBlocked: amqp_method_number_t = 0x000A_003C
    static let connectionUnblocked: amqp_method_number_t = 0x000A_003D
    static let channelClose: amqp_method_number_t = 0x0014_0028
    static let channelCloseOk: amqp_method_number_t = 0x0014_0029
    static let basicCancel: amqp_method_number_t = 0x003C_001E
    static let basicCancelOk: amqp_method_number_t = 0x003C_001F
    static let basicReturn: amqp_method_number_t = 0x003C_0032
    static let basicDeliver: amqp_method_number_t = 0x003C_003C
    static let basicGetOk: amqp_method_number_t = 0x003C_0047
    static let basicAck: amqp_method_number_t = 0x003C_0050
    static let basicNack: amqp_method_number_t = 0x003C_0078
}

/// A failure that kills the whole connection (socket error, heartbeat timeout, connection.close):
/// the driver tears down and reconnects. Channel-level failures are plain `AMQPError`s.
struct ConnectionFailure: Error {
    var error: AMQPError
}

/// Runs on the connection's own thread and owns everything librabbitmq touches.
///
/// `@unchecked Sendable` is safe because the instance is created by `AMQPConnection.connect`,
/// handed to exactly one `Thread` closure, and never referenced anywhere else: after
/// `Thread.start()` all of its mutable state is read and written only by that thread. What it
/// shares with callers goes through `connection.shared` (a `Mutex`), `DeliveryBuffer`s
/// (a `Mutex` each) and continuations, which are Sendable.
final class ConnectionDriver: @unchecked Sendable {
    private static let controlChannel: amqp_channel_t = 1
    private static let publishChannel: amqp_channel_t = 2
    private static let firstConsumerChannel: amqp_channel_t = 3

    private let configuration: AMQPConfiguration
    private let connection: AMQPConnection
    private var logger: Logger
    private let arena = EncodingArena()

    private var conn: amqp_connection_state_t?
    private var socketFD: Int32 = -1
    private var urlIndex = 0
    private var stopRequested = false
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    private var everConnected = false

    /// Open channels and their generation; a delivery tag is honoured only while its
    /// channel's generation is still open.
    private var channelGenerations: [amqp_channel_t: UInt64] = [:] {
        // Mirrored for callers, who drop settlements of stale deliveries before queueing them.
        didSet {
            let snapshot = channelGenerations
            connection.shared.withLock { $0.openChannels = snapshot }
        }
    }
    private var nextGeneration: UInt64 = 1
    private var freeConsumerChannels: [amqp_channel_t] = []
    private var nextConsumerChannel = ConnectionDriver.firstConsumerChannel

    private var plans: [TopologyPlan] = []

    private struct Consumer {
        var request: ConsumerRequest
        var channel: amqp_channel_t?
        /// After `cancel()`: no longer restored; its channel stays open for acks.
        var cancelled = false
    }
    private var consumers: [Int: Consumer] = [:]
    private var consumerByChannel: [amqp_channel_t: Int] = [:]

    /// Content (header + body frames) being assembled per channel after a deliver or return.
    private struct Assembly {
        enum Kind {
            case delivery(tag: UInt64, redelivered: Bool, consumerTag: String)
            case returned(replyCode: UInt16, replyText: String)
        }
        var kind: Kind
        var exchange: String
        var routingKey: String
        var properties = AMQPProperties()
        var bodySize = 0
        var body: [UInt8] = []
        var headerSeen = false
    }
    private var assemblies: [amqp_channel_t: Assembly] = [:]

    /// Acks of consumer channels waiting to go out as multiple acks, per channel and the
    /// generation they belong to (a coalescer of a generation no longer open is dropped).
    private var ackCoalescers: [amqp_channel_t: (generation: UInt64, acks: AckCoalescer)] = [:]

    private struct InFlight {
        var continuation: CheckedContinuation<Void, any Error>
        /// Kept for mandatory messages only, to match a `basic.return` to its publish.
        var returnKey: (exchange: String, routingKey: String, body: [UInt8])?
        var returned: AMQPError?
    }
    private var inFlight: [UInt64: InFlight] = [:]
    private var nextPublishSequence: UInt64 = 1
    private var lowestUnconfirmed: UInt64 = 1
    private var blocked = false
    private var publishesWhileBlocked: [(AMQPOutboundMessage, CheckedContinuation<Void, any Error>)] = []

    init(configuration: AMQPConfiguration, connection: AMQPConnection, logger: Logger) {
        self.configuration = configuration
        self.connection = connection
        self.logger = logger
        self.logger[metadataKey: "amqp.connection"] = "\(configuration.connectionName)"
    }

    // MARK: Lifecycle

    func run() {
        var attempt = 0
        var random = SystemRandomNumberGenerator()
        var failuresBeforeFirstConnect = 0
        while !stopRequested {
            let url = configuration.urls[urlIndex]
            setState(.connecting)
            do {
                try open(url)
                attempt = 0
                try restore()
                everConnected = true
                connection.shared.withLock {
                    $0.connectionCount += 1
                    $0.connectedURL = url
                }
                setState(blocked ? .blocked : .connected)
                logger.info("AMQP connected", metadata: ["amqp.url": "\(url)"])
                if let first = connection.shared.withLock({ state in defer { state.firstConnect = nil }; return state.firstConnect }) {
                    first.resume()
                }
                try serve()
            } catch {
                let failure = error
                teardown(failure.error)
                if !everConnected {
                    failuresBeforeFirstConnect += 1
                    logger.warning("AMQP connect failed", metadata: ["amqp.url": "\(url)", "amqp.error": "\(failure.error)"])
                    if failuresBeforeFirstConnect >= configuration.urls.count {
                        if let first = connection.shared.withLock({ state in defer { state.firstConnect = nil }; return state.firstConnect }) {
                            first.resume(throwing: failure.error)
                        }
                        stopRequested = true
                        break
                    }
                } else {
                    logger.warning("AMQP connection lost; reconnecting", metadata: ["amqp.url": "\(url)", "amqp.error": "\(failure.error)"])
                }
                urlIndex = (urlIndex + 1) % configuration.urls.count
                setState(.disconnected)
                let delay = configuration.backoff.delay(attempt: attempt, using: &random)
                attempt += 1
                waitWhileDisconnected(delay)
            }
        }
        finish()
    }

    /// Sleeps `delay` while answering commands as a disconnected connection would.
    private func waitWhileDisconnected(_ delay: Duration) {
        let deadline = ContinuousClock.now + delay
        while !stopRequested {
            for command in takeCommands() { handleWhileDisconnected(command) }
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero || stopRequested { return }
            sleep(upTo: remaining, socket: -1)
        }
    }

    /// Ends the thread: everything pending fails with `closed`, consumers end, waiters resume.
    private func finish() {
        let closed = AMQPError(.closed, "the connection is closed")
        if conn != nil { teardown(closed) }
        for (_, consumer) in consumers { consumer.request.buffer.finish() }
        consumers.removeAll()
        setState(.closed)
        let remaining: [Command] = connection.shared.withLock { state in
            state.terminated = true
            defer { state.commands.removeAll() }
            return state.commands
        }
        for command in remaining { handleWhileDisconnected(command) }
        if let first = connection.shared.withLock({ state in defer { state.firstConnect = nil }; return state.firstConnect }) {
            first.resume(throwing: closed)
        }
        for waiter in closeWaiters { waiter.resume() }
        closeWaiters.removeAll()
        logger.debug("AMQP connection thread finished")
    }

    private func setState(_ newState: AMQPConnectionState) {
        connection.shared.withLock {
            $0.state = newState
            if newState != .connected && newState != .blocked { $0.connectedURL = nil }
        }
    }

    // MARK: Connect

    private func open(_ url: AMQPURL) throws(ConnectionFailure) {
        guard let state = amqp_new_connection() else {
            throw ConnectionFailure(error: AMQPError(.library, "amqp_new_connection failed"))
        }
        conn = state
        func fail(_ message: String, status: Int32? = nil) -> ConnectionFailure {
            ConnectionFailure(error: AMQPError(.connectionFailed, "\(url): \(message)", libraryStatus: status.map(Self.statusString)))
        }
        let socket: OpaquePointer?
        if url.tls {
            socket = amqp_ssl_socket_new(state)
            guard let socket else { throw fail("cannot create a TLS socket") }
            let tls = configuration.tls
            let caFile = tls.caFile ?? (FileManager.default.fileExists(atPath: AMQPTLSConfiguration.systemBundle) ? AMQPTLSConfiguration.systemBundle : nil)
            if let caFile {
                let status = amqp_ssl_socket_set_cacert(socket, caFile)
                guard status == AMQP_STATUS_OK.rawValue else { throw fail("cannot load CA file \(caFile)", status: status) }
            }
            amqp_ssl_socket_set_verify_peer(socket, tls.verifyPeer ? 1 : 0)
            amqp_ssl_socket_set_verify_hostname(socket, tls.verifyPeer ? 1 : 0)
            if let certificate = tls.certificateFile, let key = tls.keyFile {
                let status = amqp_ssl_socket_set_key(socket, certificate, key)
                guard status == AMQP_STATUS_OK.rawValue else { throw fail("cannot load client certificate \(certificate) / key \(key)", status: status) }
            }
        } else {
            socket = amqp_tcp_socket_new(state)
        }
        guard let socket else { throw fail("cannot create a socket") }
        var connectTimeout = Self.timeout(configuration.connectTimeout)
        let openStatus = amqp_socket_open_noblock(socket, url.host, Int32(url.port), &connectTimeout)
        guard openStatus == AMQP_STATUS_OK.rawValue else {
            throw fail("cannot connect" + Self.tlsVerificationFailure(openStatus, url: url, tls: configuration.tls), status: openStatus)
        }
        _ = amqp_set_handshake_timeout(state, &connectTimeout)
        var rpcTimeout = Self.timeout(configuration.rpcTimeout)
        _ = amqp_set_rpc_timeout(state, &rpcTimeout)

        arena.reset()
        var clientProperties = arena.table([
            "product": .string("apns-worker AMQPClient (librabbitmq)"),
            "connection_name": .string(configuration.connectionName),
            "capabilities": .table([
                "consumer_cancel_notify": .bool(true),
                "connection.blocked": .bool(true),
                "publisher_confirms": .bool(true),
                "authentication_failure_close": .bool(true),
                "basic.nack": .bool(true),
            ]),
        ])
        let heartbeatSeconds = Int32(clamping: configuration.heartbeat.milliseconds / 1000)
        let reply = crabbitmq_login_with_properties(
            state, url.vhost, 0, 131_072, heartbeatSeconds, &clientProperties, url.user, url.password)
        arena.reset()
        switch reply.reply_type {
        case AMQP_RESPONSE_NORMAL:
            break
        case AMQP_RESPONSE_SERVER_EXCEPTION:
            let (code, text) = Self.closeReason(reply.reply)
            throw ConnectionFailure(error: AMQPError(.connectionFailed, "\(url): the broker refused the login", replyCode: code, replyText: text))
        default:
            throw fail("login failed", status: reply.library_error)
        }
        socketFD = amqp_get_sockfd(state)
        blocked = false
        nextPublishSequence = 1
        lowestUnconfirmed = 1
        nextConsumerChannel = Self.firstConsumerChannel
        freeConsumerChannels.removeAll()
        logger[metadataKey: "amqp.url"] = "\(url)"
        try openChannel(Self.controlChannel)
        try openPublishChannel()
    }

    /// Re-declares the remembered plans and restarts the consumers on the new connection.
    private func restore() throws(ConnectionFailure) {
        for plan in plans {
            do {
                try declareAll(plan)
            } catch let error as AMQPError {
                logger.error("AMQP topology could not be declared again after reconnecting", metadata: ["amqp.error": "\(error)"])
            } catch let failure as ConnectionFailure {
                throw failure
            } catch {}
        }
        for id in consumers.keys.sorted() {
            guard let consumer = consumers[id] else { continue }
            if consumer.cancelled {
                consumers[id] = nil
                continue
            }
            do {
                try establish(id)
            } catch let error as AMQPError {
                logger.error("AMQP consumer could not be restored", metadata: ["amqp.queue": "\(consumer.request.queue)", "amqp.error": "\(error)"])
                consumer.request.buffer.finish(throwing: error)
                consumers[id] = nil
            } catch let failure as ConnectionFailure {
                throw failure
            } catch {}
        }
    }

    /// Forgets the dead connection: publishes in flight fail, every channel generation ends
    /// (their delivery tags become stale), consumers wait for the next connection.
    private func teardown(_ error: AMQPError) {
        if let state = conn {
            amqp_destroy_connection(state)
            conn = nil
        }
        socketFD = -1
        failInFlightPublishes(error.code == .closed ? error : AMQPError(.connectionLost, "the connection was lost before the broker confirmed the publish: \(error.message)", replyCode: error.replyCode, replyText: error.replyText, libraryStatus: error.libraryStatus))
        for (message, continuation) in publishesWhileBlocked {
            _ = message
            continuation.resume(throwing: AMQPError(.connectionLost, "the connection was lost while the broker blocked publishing"))
        }
        publishesWhileBlocked.removeAll()
        channelGenerations.removeAll()
        assemblies.removeAll()
        ackCoalescers.removeAll()
        consumerByChannel.removeAll()
        for id in consumers.keys { consumers[id]?.channel = nil }
        blocked = false
        logger[metadataKey: "amqp.url"] = nil
    }

    // MARK: Serve

    private func serve() throws(ConnectionFailure) {
        while true {
            if stopRequested {
                closeGracefully()
                return
            }
            let commands = takeCommands()
            for command in commands { try handle(command) }
            try flushAcks()
            if stopRequested { continue }
            var handled = 0
            while handled < 256, let state = conn {
                var frame = amqp_frame_t()
                var immediately = timeval(tv_sec: 0, tv_usec: 0)
                let status = amqp_simple_wait_frame_noblock(state, &frame, &immediately)
                if status == AMQP_STATUS_TIMEOUT.rawValue { break }
                guard status == AMQP_STATUS_OK.rawValue else {
                    throw ConnectionFailure(error: AMQPError(.connectionLost, "reading from the broker failed", libraryStatus: Self.statusString(status)))
                }
                try handleFrame(&frame)
                if let state = conn { amqp_maybe_release_buffers_on_channel(state, frame.channel) }
                handled += 1
            }
            if handled == 0 && commands.isEmpty {
                sleep(upTo: untilNextAckDeadline(atMost: configuration.pollInterval), socket: socketFD)
            }
        }
    }

    private func takeCommands() -> [Command] {
        connection.shared.withLock { state in
            guard !state.commands.isEmpty else { return [] }
            defer { state.commands.removeAll(keepingCapacity: true) }
            return state.commands
        }
    }

    /// Sleeps until the socket is readable, a command arrives or `duration` passes.
    private func sleep(upTo duration: Duration, socket: Int32) {
        let goToSleep = connection.shared.withLock { state in
            guard state.commands.isEmpty else { return false }
            state.sleeping = true
            return true
        }
        guard goToSleep else { return }
        let milliseconds = Int32(clamping: max(1, duration.milliseconds))
        let result = crabbitmq_wait_readable(socket, connection.wakeFD, milliseconds)
        connection.shared.withLock { $0.sleeping = false }
        if result > 0 && result & 2 != 0 { crabbitmq_wakeup_drain(connection.wakeFD) }
    }

    private func closeGracefully() {
        guard let state = conn else { return }
        try? flushAcks(force: true)
        for (id, consumer) in consumers where !consumer.cancelled {
            if let channel = consumer.channel {
                _ = amqp_basic_cancel(state, channel, arena.bytes(consumer.request.tag))
                arena.reset()
            }
            consumers[id]?.cancelled = true
        }
        _ = amqp_connection_close(state, AMQP_REPLY_SUCCESS)
        teardown(AMQPError(.closed, "the connection is closed"))
        logger.info("AMQP connection closed")
    }

    // MARK: Commands

    private func handleWhileDisconnected(_ command: Command) {
        let notConnected = AMQPError(stopRequested ? .closed : .notConnected, stopRequested ? "the connection is closed" : "not connected to the broker (reconnecting)")
        switch command {
        case .publish(_, let continuation): continuation.resume(throwing: notConnected)
        case .settle: break
        case .rpc(let request, let continuation):
            if case .declarePlan(let plan) = request, !stopRequested, everConnected {
                // Remembered and declared with the next connection, like consumers.
                if !plans.contains(plan) { plans.append(plan) }
            }
            continuation.resume(throwing: notConnected)
        case .consume(let request, let continuation):
            if stopRequested {
                continuation.resume(throwing: notConnected)
            } else {
                consumers[request.id] = Consumer(request: request)
                continuation.resume()
            }
        case .cancelConsumer(let id, let continuation):
            if let consumer = consumers.removeValue(forKey: id) { consumer.request.buffer.finish() }
            continuation.resume()
        case .close(let continuation):
            stopRequested = true
            closeWaiters.append(continuation)
        }
    }

    private func handle(_ command: Command) throws(ConnectionFailure) {
        guard let state = conn else {
            handleWhileDisconnected(command)
            return
        }
        switch command {
        case .publish(let message, let continuation):
            if blocked {
                publishesWhileBlocked.append((message, continuation))
            } else {
                try send(message, continuation, on: state)
            }
        case .settle(let tag, let kind):
            // Checked again here: the channel may have died after the caller queued this.
            guard channelGenerations[tag.channel] == tag.generation else {
                logger.debug("AMQP settlement of a stale delivery dropped", metadata: ["amqp.delivery_tag": "\(tag)"])
                return
            }
            let coalesced = tag.channel >= Self.firstConsumerChannel
            let status: Int32
            switch kind {
            case .ack where coalesced:
                let now = Self.monotonicNanoseconds()
                coalescing(tag.channel, tag.generation) { $0.ack(tag.value, now: now) }
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
            consumers[request.id] = Consumer(request: request)
            do {
                try establish(request.id)
                continuation.resume()
            } catch let error as AMQPError {
                consumers[request.id] = nil
                continuation.resume(throwing: error)
            } catch let failure as ConnectionFailure {
                consumers[request.id] = nil
                continuation.resume(throwing: failure.error)
                throw failure
            } catch {
                consumers[request.id] = nil
                continuation.resume(throwing: error)
            }
        case .cancelConsumer(let id, let continuation):
            defer { continuation.resume() }
            guard let consumer = consumers[id], !consumer.cancelled else { return }
            consumers[id]?.cancelled = true
            consumer.request.buffer.finish()
            if let channel = consumer.channel {
                _ = amqp_basic_cancel(state, channel, arena.bytes(consumer.request.tag))
                arena.reset()
                let reply = amqp_get_rpc_reply(state)
                if reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION {
                    throw ConnectionFailure(error: AMQPError(.connectionLost, "basic.cancel failed", libraryStatus: Self.statusString(reply.library_error)))
                }
                amqp_maybe_release_buffers_on_channel(state, channel)
            }
        case .close(let continuation):
            stopRequested = true
            closeWaiters.append(continuation)
        }
    }

    // MARK: Coalesced acks

    /// Sends what the coalescers of open consumer channels have ready (everything with
    /// `force`); coalescers of channels closed since are dropped, unsent: the broker has
    /// requeued their deliveries.
    private func flushAcks(force: Bool = false) throws(ConnectionFailure) {
        guard !ackCoalescers.isEmpty, let state = conn else { return }
        let now = Self.monotonicNanoseconds()
        for channel in Array(ackCoalescers.keys) {
            guard let generation = ackCoalescers[channel]?.generation, channelGenerations[channel] == generation else {
                ackCoalescers[channel] = nil
                continue
            }
            guard ackCoalescers[channel]!.acks.waitingCount > 0 else { continue }
            let frames = ackCoalescers[channel]!.acks.flush(now: now, force: force)
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

    /// The coalescer of a consumer channel's current generation, made on first use.
    private func coalescing(_ channel: amqp_channel_t, _ generation: UInt64, _ change: (inout AckCoalescer) -> Void) {
        if ackCoalescers[channel]?.generation != generation { ackCoalescers[channel] = (generation, AckCoalescer()) }
        change(&ackCoalescers[channel]!.acks)
    }

    /// How long the thread may sleep before a held ack is due, at most `limit`.
    private func untilNextAckDeadline(atMost limit: Duration) -> Duration {
        let deadlines = ackCoalescers.values.compactMap { $0.acks.nextDeadline() }
        guard let next = deadlines.min() else { return limit }
        let now = Self.monotonicNanoseconds()
        let remaining = next > now ? Duration.nanoseconds(Int64(clamping: next - now)) : .zero
        return min(limit, remaining)
    }

    static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    // MARK: Publishing

    private func openPublishChannel() throws(ConnectionFailure) {
        try openChannel(Self.publishChannel)
        guard let state = conn else { return }
        _ = amqp_confirm_select(state, Self.publishChannel)
        do {
            try check(amqp_get_rpc_reply(state), channel: Self.publishChannel, reopen: false, context: "confirm.select")
        } catch let error as AMQPError {
            throw ConnectionFailure(error: error)
        } catch let failure as ConnectionFailure {
            throw failure
        } catch {}
        nextPublishSequence = 1
        lowestUnconfirmed = 1
    }

    private func send(_ message: AMQPOutboundMessage, _ continuation: CheckedContinuation<Void, any Error>, on state: amqp_connection_state_t) throws(ConnectionFailure) {
        arena.reset()
        var properties = arena.properties(message.properties)
        let exchange = arena.bytes(message.exchange)
        let routingKey = arena.bytes(message.routingKey)
        let status = message.body.withUnsafeBytes { body in
            amqp_basic_publish(
                state, Self.publishChannel, exchange, routingKey, message.mandatory ? 1 : 0, 0, &properties,
                amqp_bytes_t(len: body.count, bytes: body.count == 0 ? nil : UnsafeMutableRawPointer(mutating: body.baseAddress)))
        }
        arena.reset()
        guard status == AMQP_STATUS_OK.rawValue else {
            continuation.resume(throwing: AMQPError(.connectionLost, "sending the publish failed", libraryStatus: Self.statusString(status)))
            throw ConnectionFailure(error: AMQPError(.connectionLost, "publishing failed", libraryStatus: Self.statusString(status)))
        }
        let sequence = nextPublishSequence
        nextPublishSequence += 1
        inFlight[sequence] = InFlight(
            continuation: continuation,
            returnKey: message.mandatory ? (message.exchange, message.routingKey, message.body) : nil)
    }

    /// `basic.ack` / `basic.nack` on the confirm channel, `multiple` included.
    private func confirm(upTo tag: UInt64, multiple: Bool, ack: Bool) {
        let range: ClosedRange<UInt64> = multiple ? min(lowestUnconfirmed, tag)...tag : tag...tag
        for sequence in range {
            guard let entry = inFlight.removeValue(forKey: sequence) else { continue }
            if !ack {
                entry.continuation.resume(throwing: AMQPError(.publishNacked, "the broker nacked the publish (it could not take responsibility for it)"))
            } else if let returned = entry.returned {
                entry.continuation.resume(throwing: returned)
            } else {
                entry.continuation.resume()
            }
        }
        while lowestUnconfirmed < nextPublishSequence && inFlight[lowestUnconfirmed] == nil { lowestUnconfirmed += 1 }
    }

    /// A `basic.return` precedes the ack of its message; it carries no sequence number, so it is
    /// matched to the oldest unconfirmed mandatory publish with the same exchange, key and body.
    private func matchReturn(_ assembly: Assembly, replyCode: UInt16, replyText: String) {
        let error = AMQPError(
            .publishReturned,
            "the broker returned the message: exchange '\(assembly.exchange)' has no queue bound for routing key '\(assembly.routingKey)'",
            replyCode: replyCode, replyText: replyText, exchange: assembly.exchange)
        var sequence = lowestUnconfirmed
        while sequence < nextPublishSequence {
            if let entry = inFlight[sequence], entry.returned == nil, let key = entry.returnKey,
                key.exchange == assembly.exchange, key.routingKey == assembly.routingKey, key.body == assembly.body
            {
                inFlight[sequence]?.returned = error
                return
            }
            sequence += 1
        }
        logger.warning("AMQP basic.return matched no publish in flight", metadata: ["amqp.exchange": "\(assembly.exchange)", "amqp.routing_key": "\(assembly.routingKey)"])
    }

    private func failInFlightPublishes(_ error: AMQPError) {
        let pending = inFlight
        inFlight.removeAll()
        for sequence in pending.keys.sorted() { pending[sequence]?.continuation.resume(throwing: error) }
        lowestUnconfirmed = nextPublishSequence
    }

    // MARK: Frames

    private func handleFrame(_ frame: inout amqp_frame_t) throws(ConnectionFailure) {
        let channel = frame.channel
        switch Int32(frame.frame_type) {
        case AMQP_FRAME_METHOD:
            try handleMethod(frame.payload.method, channel: channel)
        case AMQP_FRAME_HEADER:
            guard var assembly = assemblies[channel] else { return }
            if let decoded = frame.payload.properties.decoded {
                assembly.properties = FieldDecoder.properties(decoded.assumingMemoryBound(to: amqp_basic_properties_t.self).pointee)
            }
            assembly.bodySize = Int(frame.payload.properties.body_size)
            assembly.headerSeen = true
            assembly.body.reserveCapacity(assembly.bodySize)
            if assembly.bodySize == 0 {
                assemblies[channel] = nil
                complete(assembly, channel: channel)
            } else {
                assemblies[channel] = assembly
            }
        case AMQP_FRAME_BODY:
            guard var assembly = assemblies.removeValue(forKey: channel) else { return }
            assembly.body.append(contentsOf: FieldDecoder.bytes(frame.payload.body_fragment))
            if assembly.body.count >= assembly.bodySize {
                complete(assembly, channel: channel)
            } else {
                assemblies[channel] = assembly
            }
        default:
            break
        }
    }

    private func handleMethod(_ method: amqp_method_t, channel: amqp_channel_t) throws(ConnectionFailure) {
        guard let decoded = method.decoded else { return }
        switch method.id {
        case AMQPMethod.basicDeliver:
            let m = decoded.assumingMemoryBound(to: amqp_basic_deliver_t.self).pointee
            assemblies[channel] = Assembly(
                kind: .delivery(tag: m.delivery_tag, redelivered: m.redelivered != 0, consumerTag: FieldDecoder.string(m.consumer_tag)),
                exchange: FieldDecoder.string(m.exchange), routingKey: FieldDecoder.string(m.routing_key))
        case AMQPMethod.basicReturn:
            let m = decoded.assumingMemoryBound(to: amqp_basic_return_t.self).pointee
            assemblies[channel] = Assembly(
                kind: .returned(replyCode: m.reply_code, replyText: FieldDecoder.string(m.reply_text)),
                exchange: FieldDecoder.string(m.exchange), routingKey: FieldDecoder.string(m.routing_key))
        case AMQPMethod.basicAck where channel == Self.publishChannel:
            let m = decoded.assumingMemoryBound(to: amqp_basic_ack_t.self).pointee
            confirm(upTo: m.delivery_tag, multiple: m.multiple != 0, ack: true)
        case AMQPMethod.basicNack where channel == Self.publishChannel:
            let m = decoded.assumingMemoryBound(to: amqp_basic_nack_t.self).pointee
            confirm(upTo: m.delivery_tag, multiple: m.multiple != 0, ack: false)
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
                let (message, continuation) = publishesWhileBlocked.removeFirst()
                // On failure the rest stay queued; teardown fails them.
                try send(message, continuation, on: state)
            }
        default:
            break
        }
    }

    private func complete(_ assembly: Assembly, channel: amqp_channel_t) {
        switch assembly.kind {
        case .delivery(let tag, let redelivered, let consumerTag):
            guard let id = consumerByChannel[channel], let consumer = consumers[id], let generation = channelGenerations[channel] else { return }
            let message = AMQPDeliveredMessage(
                exchange: assembly.exchange, routingKey: assembly.routingKey, redelivered: redelivered,
                body: assembly.body, properties: assembly.properties)
            let accepted = consumer.request.buffer.push(AMQPDelivery(
                message: message, tag: AMQPDeliveryTag(channel: channel, generation: generation, value: tag), consumerTag: consumerTag))
            if !accepted, let state = conn {
                // Sent by the broker before it processed our basic.cancel: the consumer's
                // sequence has ended, so nobody would ever settle it and it would sit unacked
                // on this still-open channel until the connection closed. Hand it back now.
                _ = amqp_basic_reject(state, channel, tag, 1)
                coalescing(channel, generation) { $0.settledElsewhere(tag) }
            }
        case .returned(let replyCode, let replyText):
            matchReturn(assembly, replyCode: replyCode, replyText: replyText)
        }
    }

    private func consumerCancelledByBroker(channel: amqp_channel_t, tag: String) throws(ConnectionFailure) {
        guard let id = consumerByChannel[channel], let consumer = consumers[id] else { return }
        logger.warning("AMQP broker cancelled a consumer (queue deleted?)", metadata: ["amqp.queue": "\(consumer.request.queue)", "amqp.consumer_tag": "\(tag)"])
        consumers[id] = nil
        consumer.request.buffer.finish(throwing: AMQPError(
            .consumerCancelled, "the broker cancelled the consumer of queue '\(consumer.request.queue)' (the queue was deleted or its node went down)",
            queue: consumer.request.queue))
        closeChannel(channel)
    }

    /// A channel exception on a channel we did not wait on synchronously: answer close-ok,
    /// then repair what used the channel.
    private func channelClosedByBroker(_ channel: amqp_channel_t, replyCode: UInt16, replyText: String) throws(ConnectionFailure) {
        guard let state = conn else { return }
        var ok = amqp_channel_close_ok_t(dummy: 0)
        _ = amqp_send_method(state, channel, AMQPMethod.channelCloseOk, &ok)
        channelGenerations[channel] = nil
        assemblies[channel] = nil
        logger.warning("AMQP broker closed a channel", metadata: ["amqp.channel": "\(channel)", "amqp.reply_code": "\(replyCode)", "amqp.reply_text": "\(replyText)"])
        if channel == Self.publishChannel {
            failInFlightPublishes(AMQPError(.channelClosed, "the broker closed the publishing channel", replyCode: replyCode, replyText: replyText))
            try openPublishChannel()
        } else if channel == Self.controlChannel {
            try openChannel(Self.controlChannel)
        } else if let id = consumerByChannel.removeValue(forKey: channel), let consumer = consumers[id] {
            releaseConsumerChannel(channel)
            consumers[id]?.channel = nil
            guard !consumer.cancelled else { return }
            do {
                try establish(id)
            } catch let error as AMQPError {
                consumers[id] = nil
                consumer.request.buffer.finish(throwing: error)
            } catch let failure as ConnectionFailure {
                throw failure
            } catch {}
        }
    }

    // MARK: Channels

    private func openChannel(_ channel: amqp_channel_t) throws(ConnectionFailure) {
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
        channelGenerations[channel] = nextGeneration
        nextGeneration += 1
    }

    private func closeChannel(_ channel: amqp_channel_t) {
        channelGenerations[channel] = nil
        assemblies[channel] = nil
        if let id = consumerByChannel.removeValue(forKey: channel) { consumers[id]?.channel = nil }
        if let state = conn {
            _ = amqp_channel_close(state, channel, AMQP_REPLY_SUCCESS)
            amqp_maybe_release_buffers_on_channel(state, channel)
        }
        releaseConsumerChannel(channel)
    }

    private func allocateConsumerChannel() -> amqp_channel_t {
        if let channel = freeConsumerChannels.popLast() { return channel }
        defer { nextConsumerChannel += 1 }
        return nextConsumerChannel
    }

    private func releaseConsumerChannel(_ channel: amqp_channel_t) {
        if channel >= Self.firstConsumerChannel && !freeConsumerChannels.contains(channel) { freeConsumerChannels.append(channel) }
    }

    /// Opens a channel for the consumer, sets its prefetch and starts `basic.consume`.
    private func establish(_ id: Int) throws {
        guard let state = conn, let consumer = consumers[id] else { return }
        let request = consumer.request
        let channel = allocateConsumerChannel()
        try openChannel(channel)
        do {
            _ = amqp_basic_qos(state, channel, 0, request.prefetch, 0)
            try check(amqp_get_rpc_reply(state), channel: channel, reopen: false, context: "basic.qos on queue '\(request.queue)'")
            arena.reset()
            _ = amqp_basic_consume(state, channel, arena.bytes(request.queue), arena.bytes(request.tag), 0, 0, 0, amqp_table_t(num_entries: 0, entries: nil))
            arena.reset()
            try check(amqp_get_rpc_reply(state), channel: channel, reopen: false, context: "consuming queue '\(request.queue)'", queue: request.queue)
        } catch {
            channelGenerations[channel] = nil
            releaseConsumerChannel(channel)
            throw error
        }
        amqp_maybe_release_buffers_on_channel(state, channel)
        consumers[id]?.channel = channel
        consumerByChannel[channel] = id
        logger.debug("AMQP consumer started", metadata: ["amqp.queue": "\(request.queue)", "amqp.channel": "\(channel)", "amqp.prefetch": "\(request.prefetch)"])
    }

    // MARK: RPCs on the control channel

    private func perform(_ request: RPCRequest) throws -> RPCResult {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        let channel = Self.controlChannel
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
            let ok = amqp_queue_declare(state, channel, arena.bytes(name), 1, 0, 0, 0, amqp_table_t(num_entries: 0, entries: nil))
            try check(amqp_get_rpc_reply(state), channel: channel, reopen: true, context: "inspecting queue '\(name)'", queue: name)
            guard let ok else { throw AMQPError(.library, "queue.declare-ok missing") }
            return .queueInfo(AMQPQueueInfo(name: name, messageCount: ok.pointee.message_count, consumerCount: ok.pointee.consumer_count))
        case .get(let queue):
            return .delivery(try get(queue))
        }
    }

    private func declareAll(_ plan: TopologyPlan) throws {
        for exchange in plan.exchanges { try declare(exchange) }
        for queue in plan.queues { try declare(queue) }
        for binding in plan.bindings { try bind(binding) }
    }

    private func declare(_ exchange: ExchangeDeclaration) throws {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        defer { arena.reset() }
        _ = amqp_exchange_declare(
            state, Self.controlChannel, arena.bytes(exchange.name), arena.bytes(exchange.kind.rawValue),
            0, 1, 0, 0, arena.table(exchange.arguments))
        try check(amqp_get_rpc_reply(state), channel: Self.controlChannel, reopen: true, context: "declaring exchange '\(exchange.name)'", exchange: exchange.name)
        amqp_maybe_release_buffers_on_channel(state, Self.controlChannel)
    }

    @discardableResult
    private func declare(_ queue: QueueDeclaration) throws -> AMQPQueueInfo {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        defer { arena.reset() }
        let ok = amqp_queue_declare(state, Self.controlChannel, arena.bytes(queue.name), 0, 1, 0, 0, arena.table(queue.arguments))
        try check(amqp_get_rpc_reply(state), channel: Self.controlChannel, reopen: true, context: "declaring queue '\(queue.name)'", queue: queue.name)
        let info = AMQPQueueInfo(name: queue.name, messageCount: ok?.pointee.message_count ?? 0, consumerCount: ok?.pointee.consumer_count ?? 0)
        amqp_maybe_release_buffers_on_channel(state, Self.controlChannel)
        return info
    }

    private func bind(_ binding: BindingDeclaration) throws {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        defer { arena.reset() }
        _ = amqp_queue_bind(
            state, Self.controlChannel, arena.bytes(binding.queue), arena.bytes(binding.exchange), arena.bytes(binding.routingKey),
            amqp_table_t(num_entries: 0, entries: nil))
        try check(amqp_get_rpc_reply(state), channel: Self.controlChannel, reopen: true,
                  context: "binding queue '\(binding.queue)' to exchange '\(binding.exchange)' with key '\(binding.routingKey)'",
                  queue: binding.queue, exchange: binding.exchange)
        amqp_maybe_release_buffers_on_channel(state, Self.controlChannel)
    }

    private func get(_ queue: String) throws -> AMQPDelivery? {
        guard let state = conn else { throw AMQPError(.notConnected, "not connected to the broker") }
        let channel = Self.controlChannel
        let reply = amqp_basic_get(state, channel, arena.bytes(queue), 0)
        arena.reset()
        try check(reply, channel: channel, reopen: true, context: "basic.get on queue '\(queue)'", queue: queue)
        guard reply.reply.id == AMQPMethod.basicGetOk, let decoded = reply.reply.decoded else { return nil }
        let ok = decoded.assumingMemoryBound(to: amqp_basic_get_ok_t.self).pointee
        let deliveryTag = ok.delivery_tag
        let redelivered = ok.redelivered != 0
        let exchange = FieldDecoder.string(ok.exchange)
        let routingKey = FieldDecoder.string(ok.routing_key)
        var message = amqp_message_t()
        let read = amqp_read_message(state, channel, &message, 0)
        guard read.reply_type == AMQP_RESPONSE_NORMAL else {
            throw ConnectionFailure(error: AMQPError(.connectionLost, "reading the message of basic.get failed", libraryStatus: Self.statusString(read.library_error)))
        }
        defer { amqp_destroy_message(&message) }
        guard let generation = channelGenerations[channel] else { return nil }
        return AMQPDelivery(
            message: AMQPDeliveredMessage(
                exchange: exchange, routingKey: routingKey, redelivered: redelivered,
                body: FieldDecoder.bytes(message.body), properties: FieldDecoder.properties(message.properties)),
            tag: AMQPDeliveryTag(channel: channel, generation: generation, value: deliveryTag), consumerTag: nil)
    }

    /// Turns an RPC reply into success, a channel-level `AMQPError` (after answering the
    /// broker's channel.close and, with `reopen`, opening the channel again), or a
    /// `ConnectionFailure`.
    private func check(
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
            channelGenerations[channel] = nil
            if reopen {
                if channel == Self.publishChannel { try openPublishChannel() } else { try openChannel(channel) }
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

    private static func closeReason(_ method: amqp_method_t) -> (UInt16, String) {
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

    private static func timeout(_ duration: Duration) -> timeval {
        let ms = duration.milliseconds
        return timeval(tv_sec: Int(ms / 1000), tv_usec: Int((ms % 1000) * 1000))
    }
}
