// The owner thread of one AMQP connection: the only code that touches librabbitmq state.
// It connects (failover + backoff), restores topology and consumers, then loops: carry out
// queued commands, read every available frame, sleep in poll(2) on socket + eventfd.
// The decisions are values of their own, tested without a broker: where and when to connect
// (`ReconnectPolicy`), when to sleep between turns of the serve loop (`ServeSchedule`), when a
// caller wakes the thread (`WakeDecision`), which tags are good (`ChannelTable`), confirms
// (`PublishConfirms`) and acks (`AckCoalescer`); the driver carries them out. Its parts:
// this file (state, lifecycle, connect, serve), `+Commands` (callers' commands, acks,
// publishing), `+Frames` (what the broker sends, channels), `+Control` (RPCs, topology).
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
    static let basicReturn: amqp_method_number_t = 0x003C_0032
    static let basicDeliver: amqp_method_number_t = 0x003C_003C
    static let basicGetOk: amqp_method_number_t = 0x003C_0047
    static let basicPublish: amqp_method_number_t = 0x003C_0028
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
/// `@unchecked Sendable` only because `Thread`'s block must be `@Sendable` to capture it. That is
/// safe: `AMQPConnection.startOwnerThread` (from `connect()`, once per connection, as
/// `claimStart` decides) makes the instance and hands it to that one `Thread` closure, and
/// nothing else keeps it, so after `Thread.start()` its mutable state is read and written only
/// by that thread. The only other instance is the one `close()` makes for a connection never
/// connected: it gets no thread and is finished at once on the closing task, and `claimStart`
/// keeps any owner thread from starting afterwards. Callers never reach the driver: they go
/// through what it shares, the `connection.shared` `Mutex` (commands, state, the first-connect
/// and end waiters), the `OwnerWake` eventfd, `DeliveryBuffer`s (a `Mutex` each) and the
/// continuations it resumes.
/// Its members are internal, not private, only so that its own extensions in the
/// `ConnectionDriver+…` files reach them.
final class ConnectionDriver: @unchecked Sendable {
    let configuration: AMQPConfiguration
    let connection: AMQPConnection
    var logger: Logger
    let arena = EncodingArena()

    var conn: amqp_connection_state_t?
    var socketFD: Int32 = -1
    var reconnect: ReconnectPolicy
    var stopRequested = false
    var closeWaiters: [CheckedContinuation<Void, Never>] = []

    /// Open channels and their generation; a delivery tag is honoured only while its
    /// channel's generation is still open.
    var channels = ChannelTable() {
        // Mirrored for callers, who drop settlements of stale deliveries before queueing them.
        didSet {
            guard channels.generations != oldValue.generations else { return }
            let snapshot = channels.generations
            connection.shared.withLock { $0.openChannels = snapshot }
        }
    }

    var plans: [TopologyPlan] = []

    var consumers = ConsumerRegistry<ConsumerRequest>()

    /// Messages (header + body frames) being put together per channel after a deliver or return.
    var assembler = ContentAssembler()
    var repeatedStrings = RepeatedStrings()

    /// Acks of consumer channels waiting to go out as multiple acks, per channel and the
    /// generation they belong to (a coalescer of a generation no longer open is dropped).
    var ackCoalescers: [amqp_channel_t: AckCoalescerSlot] = [:]

    /// Oversized deliveries whose dead letters go out frame by frame (`+Oversized`): the one
    /// arriving now per consumer channel, those sent and waiting for their confirm per stream
    /// channel, and the stream channel of each consumer channel.
    var oversizedStreaming: [amqp_channel_t: OversizedStream] = [:]
    var oversizedAwaiting: [amqp_channel_t: [OversizedStream]] = [:]
    var streamChannels: [amqp_channel_t: StreamChannel] = [:]
    /// The oversized message a `basic.get` waits for, handed over once its copy is settled.
    var oversizedGetCopy: ContentAssembler.Message?

    var confirms = PublishConfirms<PublishWaiter>()
    var blocked = false
    var publishesWhileBlocked: [(AMQPOutboundMessage, PublishWaiter)] = []

    init(configuration: AMQPConfiguration, connection: AMQPConnection, logger: Logger) {
        self.configuration = configuration
        self.connection = connection
        self.logger = logger
        self.logger[metadataKey: "amqp.connection"] = "\(configuration.connectionName)"
        self.reconnect = ReconnectPolicy(urlCount: configuration.urls.count, backoff: configuration.backoff)
    }

    // MARK: Lifecycle

    func run() {
        var random = SystemRandomNumberGenerator()
        while !stopRequested {
            let url = configuration.urls[reconnect.urlIndex]
            setState(.connecting)
            do {
                try open(url)
                try restore()
                reconnect.established(at: .now)
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
                if reconnect.everConnected {
                    logger.warning("AMQP connection lost; reconnecting", metadata: ["amqp.url": "\(url)", "amqp.error": "\(failure.error)"])
                } else {
                    logger.warning("AMQP connect failed", metadata: ["amqp.url": "\(url)", "amqp.error": "\(failure.error)"])
                }
                switch reconnect.failed(at: .now, using: &random) {
                case .giveUp:
                    if let first = connection.shared.withLock({ state in defer { state.firstConnect = nil }; return state.firstConnect }) {
                        first.resume(throwing: failure.error)
                    }
                    stopRequested = true
                case .retry(let delay):
                    setState(.disconnected)
                    waitWhileDisconnected(delay)
                }
            }
        }
        finish()
    }

    /// Sleeps `delay` while answering commands as a disconnected connection would.
    func waitWhileDisconnected(_ delay: Duration) {
        let deadline = ContinuousClock.now + delay
        while !stopRequested {
            for command in takeCommands() { handleWhileDisconnected(command) }
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero || stopRequested { return }
            sleep(ServeSchedule.Sleep(timeout: remaining), socket: -1)
        }
    }

    /// Ends the thread: everything pending fails with `closed`, consumers end, waiters resume.
    func finish() {
        let closed = AMQPError(.closed, "the connection is closed")
        if conn != nil { teardown(closed) }
        for request in consumers.removeAll() { request.buffer.finish() }
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
        let ended = connection.shared.withLock { state in
            state.ended = true
            defer { state.endWaiters.removeAll() }
            return state.endWaiters
        }
        for waiter in ended { waiter.resume() }
    }

    func setState(_ newState: AMQPConnectionState) {
        connection.shared.withLock {
            $0.state = newState
            if newState != .connected && newState != .blocked { $0.connectedURL = nil }
        }
    }

    // MARK: Connect

    func open(_ url: AMQPURL) throws(ConnectionFailure) {
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
            if let pem = tls.caCertificates {
                let status = pem.withUnsafeBytes { crabbitmq_ssl_socket_set_cacert_pem(socket, $0.baseAddress, $0.count) }
                guard status == AMQP_STATUS_OK.rawValue else {
                    throw fail("no CA certificate in the PEM read from \(caFile ?? "the CA file")", status: status)
                }
            } else if let caFile {
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
        let heartbeatSeconds = Int32(clamping: configuration.heartbeat.wholeMilliseconds / 1000)
        let reply = crabbitmq_login_with_properties(
            state, url.vhost, 0, Int32(clamping: max(4_096, configuration.frameMax)), heartbeatSeconds, &clientProperties, url.user, url.password)
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
        confirms.restartNumbering()
        channels.newConnection()
        logger[metadataKey: "amqp.url"] = "\(url)"
        try openChannel(ChannelTable.control)
        try openChannel(ChannelTable.get)
        try openPublishChannel()
    }

    /// Re-declares the remembered plans and restarts the consumers on the new connection.
    func restore() throws(ConnectionFailure) {
        for plan in plans {
            do {
                try declareAll(plan)
            } catch let error as AMQPError {
                logger.error("AMQP topology could not be declared again after reconnecting", metadata: ["amqp.error": "\(error)"])
            } catch let failure as ConnectionFailure {
                throw failure
            } catch {}
        }
        for id in consumers.toRestore() {
            guard let consumer = consumers.entry(id) else { continue }
            do {
                try establish(id)
            } catch let error as AMQPError {
                logger.error("AMQP consumer could not be restored", metadata: ["amqp.queue": "\(consumer.request.queue)", "amqp.error": "\(error)"])
                consumer.request.buffer.finish(throwing: error)
                consumers.remove(id)
            } catch let failure as ConnectionFailure {
                throw failure
            } catch {}
        }
    }

    /// Forgets the dead connection: publishes in flight fail, every channel generation ends
    /// (their delivery tags become stale), consumers wait for the next connection.
    func teardown(_ error: AMQPError) {
        if let state = conn {
            amqp_destroy_connection(state)
            conn = nil
        }
        socketFD = -1
        failInFlightPublishes(error.code == .closed ? error : AMQPError(.connectionLost, "the connection was lost before the broker confirmed the publish: \(error.message)", replyCode: error.replyCode, replyText: error.replyText, libraryStatus: error.libraryStatus))
        for (_, waiter) in publishesWhileBlocked {
            waiter.settle(AMQPError(.connectionLost, "the connection was lost while the broker blocked publishing"))
        }
        publishesWhileBlocked.removeAll()
        channels.connectionLost()
        assembler.discardAll()
        forgetOversizedStreams()
        repeatedStrings.removeAll()
        ackCoalescers.removeAll()
        consumers.connectionLost()
        blocked = false
        logger[metadataKey: "amqp.url"] = nil
    }

    // MARK: Serve

    /// Sets TCP_CORK on the connection's socket: while it is set the kernel sends only full
    /// segments, and clearing it sends what is left. librabbitmq writes each frame of a publish
    /// with a `send` of its own and pushes the segment at the last one, so a pass of N publishes
    /// and acks cost N pushes through the TCP stack (on loopback, with the broker's receive
    /// processing charged to this thread: 9 % of the worker's CPU with delivery events on);
    /// corked, the pass costs one. librabbitmq has no call to write several frames at once.
    /// False when the socket refused (not TCP): then nothing is held.
    func setCork(_ on: Bool) -> Bool {
        guard socketFD >= 0 else { return false }
        var value: Int32 = on ? 1 : 0
        return setsockopt(socketFD, Int32(IPPROTO_TCP), TCP_CORK, &value, socklen_t(MemoryLayout<Int32>.size)) == 0
    }

    func serve() throws(ConnectionFailure) {
        var schedule = ServeSchedule()
        while true {
            if stopRequested {
                closeGracefully()
                return
            }
            let commands = takeCommands()
            // Held for this pass's writes only (a connection failure drops the socket with it).
            var corked = false
            if commands.isEmpty {
                schedule.noCommands()
            } else {
                let askedAt = schedule.commandsTaken(now: Self.monotonicNanoseconds())
                corked = Command.worthCorking(commands.lazy.map(\.publishesWithoutWaiting)) && setCork(true)
                var untried = commands[...]
                while let command = untried.popFirst() {
                    do throws(ConnectionFailure) {
                        try handle(command, askedAt: askedAt)
                    } catch {
                        // The commands taken with it and not tried yet go back to the front of the
                        // queue, answered as if queued a moment later (while disconnected, or on the
                        // next connection). Were: dropped with this batch, and their callers (an RPC
                        // behind a basic.get that lost the connection) waited forever.
                        putBack(untried)
                        throw error
                    }
                }
            }
            try flushAcks()
            if corked { _ = setCork(false) }
            if stopRequested { continue }
            var handled = 0
            var drained = false
            while handled < 256, let state = conn {
                var frame = amqp_frame_t()
                var immediately = timeval(tv_sec: 0, tv_usec: 0)
                let status = amqp_simple_wait_frame_noblock(state, &frame, &immediately)
                if status == AMQP_STATUS_TIMEOUT.rawValue {
                    drained = true
                    break
                }
                guard status == AMQP_STATUS_OK.rawValue else {
                    throw ConnectionFailure(error: AMQPError(.connectionLost, "reading from the broker failed", libraryStatus: Self.statusString(status)))
                }
                try handleFrame(&frame)
                if let state = conn { amqp_maybe_release_buffers_on_channel(state, frame.channel) }
                handled += 1
            }
            // Every frame read so far is handled: numbers closed before may be given again.
            if drained { channels.frameQueueDrained() }
            if handled == 0 && commands.isEmpty {
                let now = Self.monotonicNanoseconds()
                // Only the channels with something pending: an idle instance's 50 quiet consumers
                // were copied out at every turn of this loop (the idle profile's largest item).
                let active = ackCoalescers.values.lazy.filter { !$0.acks.hasNothingPending }.map(\.acks)
                let plan = ServeSchedule.sleep(pollInterval: configuration.pollInterval, acks: active, now: now)
                if sleep(plan, socket: socketFD) { schedule.sleeping(plan, now: now) }
            }
        }
    }

    func takeCommands() -> [Command] {
        connection.shared.withLock { state in
            guard !state.commands.isEmpty else { return [] }
            defer { state.commands.removeAll(keepingCapacity: true) }
            return state.commands
        }
    }

    /// Commands taken from the queue but not handled go back before any queued since, in order.
    func putBack(_ untried: ArraySlice<Command>) {
        guard !untried.isEmpty else { return }
        connection.shared.withLock { $0.commands.insert(contentsOf: untried, at: 0) }
    }

    /// Sleeps as `plan` says until the socket (-1: none) is readable or a command wakes the
    /// thread; false when a command was already queued (no sleep).
    @discardableResult
    func sleep(_ plan: ServeSchedule.Sleep, socket: Int32) -> Bool {
        let goToSleep = connection.shared.withLock { state in
            guard state.commands.isEmpty else { return false }
            state.wake.goingToSleep(ackBatch: plan.ackBatch)
            return true
        }
        guard goToSleep else { return false }
        connection.wake.wait(socket: socket, milliseconds: Int32(clamping: max(1, plan.timeout.wholeMilliseconds)))
        connection.shared.withLock { $0.wake.wokeUp() }
        return true
    }

    func closeGracefully() {
        guard let state = conn else { return }
        try? flushAcks(force: true)
        for id in consumers.liveIDs {
            if let consumer = consumers.cancel(id), let channel = consumer.channel {
                _ = amqp_basic_cancel(state, channel, arena.bytes(consumer.request.tag))
                arena.reset()
            }
        }
        _ = amqp_connection_close(state, AMQP_REPLY_SUCCESS)
        teardown(AMQPError(.closed, "the connection is closed"))
        logger.info("AMQP connection closed")
    }
}

/// A consumer channel's ack coalescer and the channel generation it belongs to. A class, so the
/// owner thread reads and changes it in place: as a tuple in the table it was copied, its
/// collections retained and released, at every ack and every turn of the serve loop.
final class AckCoalescerSlot {
    let generation: UInt64
    var acks: AckCoalescer

    init(generation: UInt64, acks: AckCoalescer) {
        self.generation = generation
        self.acks = acks
    }
}
