/// The legacy binary provider API transport: persistent TLS connections with a client
/// certificate, frames written as they come and flushed once per event-loop pass (so under load
/// many share a TLS record), Apple's 6-byte error responses read back, and the in-flight buffer
/// and replay of `BinaryReplayStateMachine`. A send completes only when the frame is settled: an
/// error response named it, or its hold window passed with the connection up. A ServiceLifecycle
/// `Service`: `run()` owns the connections.
import APNSBinaryProtocol
import APNSModel
import Foundation
import Logging
import Metrics
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle
import Synchronization

public final class BinaryTransport: NotificationTransport, Service, TransportStatusReporting {
    public let configuration: BinaryTransportConfiguration
    private let logger: Logger
    private let tlsContext: NIOSSLContext
    private let slots: [Slot]
    private let nextSlot = Atomic<Int>(0)
    private let shuttingDown = Atomic<Bool>(false)
    private let firstUse: FirstUseGate

    private let latency: Metrics.Timer
    private let framesWritten: Counter
    private let framesReplayed: Counter

    /// - Parameters:
    ///   - eventLoopGroup: where the connections live; NIO's shared singleton by default. Each
    ///     connection keeps one event loop for good: its buffer is only touched there.
    /// - Throws: when the TLS material (CA file, client certificate or key) cannot be loaded.
    public init(
        configuration: BinaryTransportConfiguration,
        logger: Logger,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws {
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "apns.host"] = .string(configuration.host)
        logger[metadataKey: "apns.environment"] = .string(configuration.environment.rawValue)
        logger[metadataKey: "apns.transport"] = "binary"
        self.logger = logger
        self.tlsContext = try configuration.makeTLSContext()
        self.firstUse = FirstUseGate(open: !configuration.connectOnFirstUse)
        self.slots = (0..<max(1, configuration.connections)).map { index in
            Slot(
                index: index, eventLoop: eventLoopGroup.next(),
                machine: BinaryReplayStateMachine(
                    capacity: configuration.bufferCapacity, holdWindow: configuration.holdWindow,
                    maxQueueWait: configuration.maxQueueWait),
                status: configuration.connectOnFirstUse ? .idle : .backingOff)
        }
        let env = [("environment", configuration.environment.rawValue)]
        // The same names and labels as the HTTP/2 transport's. Connection states are not a
        // meter here: the admin server samples `connectionStates()` into
        // `apns_transport_connections{bundle,state}` on each scrape.
        self.latency = Metrics.Timer(label: "apns_transport_request_duration_seconds", dimensions: env)
        self.framesWritten = Counter(label: "apns_transport_binary_frames_written_total", dimensions: env)
        self.framesReplayed = Counter(label: "apns_transport_binary_frames_replayed_total", dimensions: env)
    }

    // MARK: sending

    /// Queues the frame on a connection's event loop; `completion` runs there when the frame is
    /// settled (or at once when it cannot be framed or the transport is shutting down).
    public func send(_ notification: PushNotification, completion: @escaping @Sendable (TransportResult) -> Void) {
        let started = ContinuousClock.now
        let encoded: EncodedFrame
        do {
            encoded = try EncodedFrame(notification)
        } catch {
            // Apple would refuse the frame; it is the job's fault, so it is not sent at all.
            logger.info(
                "notification cannot be framed for the binary API",
                metadata: ["apns.id": .string(notification.id.uuidString.lowercased()), "apns.error": .string("\(error)")])
            return completion(.binaryRejected(status: BinaryStatus.protocolError.rawValue))
        }
        if shuttingDown.load(ordering: .relaxed) { return completion(.failed(.shutdown)) }
        firstUse.open()
        let slot = slots[nextSlot.wrappingAdd(1, ordering: .relaxed).oldValue % slots.count]
        let pending = PendingFrame(frame: encoded, token: notification.target.redacted, started: started, completion: completion)
        slot.eventLoop.execute { [self] in
            settle(slot) { $0.submit(pending, now: .now) }
        }
    }

    public func connectionStates() -> [TransportConnectionState: Int] {
        var counts = Dictionary(uniqueKeysWithValues: TransportConnectionState.allCases.map { ($0, 0) })
        for slot in slots { counts[slot.state.withLock { $0.status }, default: 0] += 1 }
        return counts
    }

    // MARK: carrying out the state machine's actions (on the slot's event loop)

    private func carryOut(_ actions: [Machine.Action], on slot: Slot) {
        slot.eventLoop.preconditionInEventLoop()
        var wrote = false
        for action in actions {
            switch action {
            case .write(let identifier, let pending, let replay):
                guard let channel = slot.state.withLock({ $0.channel }) else { continue }
                // The hold window starts when the socket has taken the frame, not when we queued
                // it: on a stalled connection a frame still in our buffers must never count as
                // delivered. Writes complete in order; a closed connection's late completions
                // are ignored by the machine.
                let promise = channel.eventLoop.makePromise(of: Void.self)
                promise.futureResult.whenSuccess { [self] in
                    settle(slot) { $0.written(through: identifier, now: ContinuousClock.now) }
                }
                channel.write(pending.frame.numbered(identifier), promise: promise)
                wrote = true
                framesWritten.increment()
                if replay { framesReplayed.increment() }
            case .complete(let pending, let result):
                if case .binaryRejected(let status) = result {
                    logger.debug(
                        "binary gateway rejected a frame",
                        metadata: ["apns.token": .string(pending.token), "apns.binary_status": .stringConvertible(status)])
                }
                latency.recordNanoseconds((ContinuousClock.now - pending.started).nanoseconds)
                pending.completion(result)
            case .scheduleHoldTimer(let at):
                let delay = max(.zero, at - ContinuousClock.now)
                slot.eventLoop.scheduleTask(in: delay.timeAmount) { [self] in
                    settle(slot) { machine in
                        let now = ContinuousClock.now
                        return machine.holdWindowElapsed(now: now)
                    }
                }
            case .closeConnection:
                slot.state.withLock { $0.channel }?.close(promise: nil)
            case .unmatchedErrorResponse(let response) where response.status == .shutdown:
                // Shutdown names the last frame Apple processed; on a quiet connection that one
                // has already passed its hold window. Normal, and the requeue is right.
                logger.debug(
                    "shutdown error response names a frame already counted as delivered",
                    metadata: ["apns.slot": .stringConvertible(slot.index), "apns.binary_identifier": .stringConvertible(response.identifier)])
            case .unmatchedErrorResponse(let response):
                logger.warning(
                    "error response names a frame no longer held; everything held is sent again (is binaryHoldWindow too short?)",
                    metadata: [
                        "apns.slot": .stringConvertible(slot.index), "apns.binary_status": .string(response.status.description),
                        "apns.binary_identifier": .stringConvertible(response.identifier),
                    ])
            }
        }
        if wrote { scheduleFlush(slot) }
    }

    /// One flush for everything written in this pass of the event loop: sends already queued
    /// behind this one are written first, so their frames share TLS records.
    private func scheduleFlush(_ slot: Slot) {
        let needed = slot.state.withLock { state -> Bool in
            if state.flushScheduled { return false }
            state.flushScheduled = true
            return true
        }
        guard needed else { return }
        slot.eventLoop.execute {
            let channel = slot.state.withLock { state -> (any Channel)? in
                state.flushScheduled = false
                return state.channel
            }
            channel?.flush()
        }
    }

    /// Runs an event through the slot's machine and carries out what it says.
    private func settle(_ slot: Slot, _ event: (inout Machine) -> [Machine.Action]) {
        let actions = slot.state.withLock { state -> [Machine.Action] in
            let actions = event(&state.machine)
            // Only Apple's word makes a connection productive; a give-up after failed connects
            // must not reset the reconnect backoff.
            for action in actions {
                switch action {
                case .complete(_, .binaryAccepted), .complete(_, .binaryRejected): state.productive = true
                default: break
                }
            }
            return actions
        }
        carryOut(actions, on: slot)
    }

    // MARK: connections

    /// Keeps every connection open until graceful shutdown or cancellation; then lets the frames
    /// held finish their hold window before closing.
    public func run() async throws {
        logger.info("binary transport starting", metadata: ["apns.connections": .stringConvertible(slots.count)])
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await withTaskGroup(of: Void.self) { group in
                    for slot in slots {
                        group.addTask { await self.keepConnected(slot) }
                    }
                }
            } onGracefulShutdown: {
                self.shutdown(closeAtOnce: false)
            }
        } onCancel: {
            self.shutdown(closeAtOnce: true)
        }
        logger.info("binary transport stopped")
    }

    private func shutdown(closeAtOnce: Bool) {
        shuttingDown.store(true, ordering: .relaxed)
        for slot in slots {
            slot.eventLoop.execute { [self] in
                settle(slot) { $0.beginShutdown() }
                if closeAtOnce { slot.state.withLock { $0.channel }?.close(promise: nil) }
            }
        }
    }

    private func keepConnected(_ slot: Slot) async {
        // A connection that settled frames is replaced at once (after a short floor so a
        // gateway that accepts and drops cannot spin us); failures back off exponentially.
        // Before the gate opens (shut down before any notification needed this transport) and
        // after the loop, the slot is closed.
        let loop = ReconnectLoop(
            backoff: ReconnectBackoff(initial: configuration.reconnectInitialDelay, maximum: configuration.reconnectMaxDelay))
        await loop.run(
            after: firstUse, isShuttingDown: { shuttingDown.load(ordering: .relaxed) },
            backingOff: { setStatus(.backingOff, slot) }
        ) {
            let generation = slot.state.withLock { state -> Int in
                state.generation += 1
                state.productive = false
                state.ended = false
                return state.generation
            }
            setStatus(.connecting, slot)
            do {
                let channel = try await connect(slot, generation: generation)
                await ReconnectLoop.serve(
                    channel, readyWithin: configuration.connectTimeout,
                    isReady: { slot.state.withLock { $0.status } != .connecting },
                    notReady: { [logger] in
                        logger.warning("TLS handshake not done in time; closing", metadata: ["apns.slot": .stringConvertible(slot.index)])
                    })
                // Usually done already by channelInactive; this makes sure before reconnecting.
                return (try? await slot.eventLoop.submit { [self] in
                    connectionEnded(slot, generation: generation, reason: "connection closed")
                }.get()) ?? false
            } catch {
                _ = try? await slot.eventLoop.submit { [self] in
                    connectionEnded(slot, generation: generation, reason: "connect failed: \(error)")
                }.get()
                logger.warning(
                    "connect failed",
                    metadata: ["apns.slot": .stringConvertible(slot.index), "apns.error": .string(String(describing: error))])
                return false
            }
        }
        setStatus(.closed, slot)
    }

    private func connect(_ slot: Slot, generation: Int) async throws -> any Channel {
        let tlsContext = self.tlsContext
        let host = configuration.host
        var bootstrap = ClientBootstrap(group: slot.eventLoop)
            .connectTimeout(configuration.connectTimeout.timeAmount)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            // A peer that vanishes without a reset must not leave frames unwritten for TCP's
            // many-minute retransmission limit: keepalive probes an idle connection, and
            // TCP_USER_TIMEOUT below fails one whose data goes unacknowledged, so held frames
            // are replayed on a new connection.
            .channelOption(ChannelOptions.socketOption(.so_keepalive), value: 1)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(ClientTLS.handler(context: tlsContext, host: host))
                    try sync.addHandler(
                        BinaryGatewayHandler { [self] event in
                            connectionEvent(event, channel: channel, slot: slot, generation: generation)
                        })
                }
            }
        #if os(Linux)
        // TCP_USER_TIMEOUT: unacknowledged data fails the connection after 30 s (Linux only).
        bootstrap = bootstrap.channelOption(
            ChannelOptions.Types.SocketOption(level: .tcp, name: .init(rawValue: CInt(TCP_USER_TIMEOUT))), value: 30_000)
        #endif
        return try await bootstrap.connect(host: host, port: configuration.port).get()
    }

    private func connectionEvent(_ event: BinaryGatewayHandler.Event, channel: any Channel, slot: Slot, generation: Int) {
        guard slot.state.withLock({ $0.generation == generation && !$0.ended }) else { return }
        switch event {
        case .ready:
            slot.state.withLock { $0.channel = channel }
            setStatus(.ready, slot)
            logger.debug("connected", metadata: ["apns.slot": .stringConvertible(slot.index)])
            settle(slot) { $0.connected(now: .now) }
        case .errorResponse(let response):
            logger.info(
                "error response from the binary gateway",
                metadata: [
                    "apns.slot": .stringConvertible(slot.index), "apns.binary_status": .string(response.status.description),
                    "apns.binary_identifier": .stringConvertible(response.identifier),
                ])
            settle(slot) { $0.errorResponse(response, now: .now) }
        case .unexpectedCommand(let command):
            logger.warning(
                "the gateway sent something other than an error response; closing",
                metadata: ["apns.slot": .stringConvertible(slot.index), "apns.binary_command": .stringConvertible(command)])
        case .failed(let error):
            logger.info(
                "binary connection failed",
                metadata: ["apns.slot": .stringConvertible(slot.index), "apns.error": .string(String(describing: error))])
        case .closed:
            _ = connectionEnded(slot, generation: generation, reason: "connection closed")
        }
    }

    /// The connection of `generation` is gone (once per generation): frames held go back to
    /// the queue. A connection that settled nothing counts as a failed connect, so sends that
    /// have waited too long give up instead of being replayed forever (a refused certificate
    /// shows up as a TLS 1.3 connection closed right after the handshake).
    /// - Returns: whether the connection settled any frame.
    private func connectionEnded(_ slot: Slot, generation: Int, reason: String) -> Bool {
        let (fresh, wasReady) = slot.state.withLock { state -> (Bool, Bool) in
            guard state.generation == generation, !state.ended else { return (false, false) }
            state.ended = true
            let wasReady = state.channel != nil
            state.channel = nil
            return (true, wasReady)
        }
        guard fresh else { return slot.state.withLock { $0.productive } }
        let now = ContinuousClock.now
        if wasReady { settle(slot) { $0.connectionClosed(reason: reason, now: now) } }
        let productive = slot.state.withLock { $0.productive }
        if !productive { settle(slot) { $0.connectFailed(reason: reason, now: now) } }
        return productive
    }

    private func setStatus(_ status: TransportConnectionState, _ slot: Slot) {
        slot.state.withLock { $0.status = status }
    }
}

extension BinaryTransport {
    fileprivate typealias Machine = BinaryReplayStateMachine<PendingFrame>

    /// A frame encoded once, numbered for each write.
    fileprivate struct EncodedFrame: Sendable {
        let bytes: ByteBuffer
        /// Where the 4-byte notification identifier lies in `bytes`.
        let identifierOffset: Int

        init(_ notification: PushNotification) throws {
            let frame = try BinaryNotificationFrame(notification: notification, identifier: 0)
            bytes = ByteBuffer(bytes: try frame.encoded())
            // The encoder writes the token, then the payload, then the identifier item.
            identifierOffset =
                BinaryProtocol.frameHeaderLength + 3 + frame.deviceToken.count + 3 + frame.payload.count + 3
        }

        func numbered(_ identifier: UInt32) -> ByteBuffer {
            var copy = bytes
            copy.setInteger(identifier, at: identifierOffset, endianness: .big)
            return copy
        }
    }

    fileprivate struct PendingFrame: Sendable {
        let frame: EncodedFrame
        /// For logs only; never the full token.
        let token: String
        let started: ContinuousClock.Instant
        /// The sender's completion; the machine completes each frame exactly once.
        let completion: @Sendable (TransportResult) -> Void
    }

    fileprivate struct SlotState: Sendable {
        var machine: Machine
        /// Set once the TLS handshake is done; nil while connecting or backing off.
        var channel: (any Channel)?
        var status: TransportConnectionState
        var generation = 0
        /// The current generation's end has been handled.
        var ended = false
        /// The current connection settled at least one frame.
        var productive = false
        var flushScheduled = false
    }

    /// One connection and its buffer. The state is only changed on `eventLoop` (which orders
    /// the writes as the machine numbered them); the lock lets `connectionStates` read it.
    fileprivate final class Slot: Sendable {
        let index: Int
        let eventLoop: any EventLoop
        let state: Mutex<SlotState>

        init(index: Int, eventLoop: any EventLoop, machine: Machine, status: TransportConnectionState) {
            self.index = index
            self.eventLoop = eventLoop
            self.state = Mutex(SlotState(machine: machine, status: status))
        }
    }
}

/// Reads what a binary gateway sends back (only 6-byte error responses) and reports the TLS
/// handshake, failures and the close; all events arrive on the channel's event loop.
final class BinaryGatewayHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    enum Event {
        case ready
        case errorResponse(BinaryErrorResponse)
        case unexpectedCommand(UInt8)
        case failed(any Error)
        case closed
    }

    private var received = ByteBuffer()
    private let onEvent: (Event) -> Void

    init(onEvent: @escaping (Event) -> Void) {
        self.onEvent = onEvent
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls {
            onEvent(.ready)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        received.writeBuffer(&bytes)
        while received.readableBytes > 0 {
            let decoded = received.withUnsafeReadableBytes { BinaryErrorResponse.decode($0) }
            switch decoded {
            case .needMoreData:
                return
            case .response(let response):
                received.moveReaderIndex(forwardBy: BinaryProtocol.errorResponseLength)
                onEvent(.errorResponse(response))
            case .invalid(let command):
                received.clear()
                onEvent(.unexpectedCommand(command))
                context.close(promise: nil)
                return
            }
        }
        received.discardReadBytes()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        onEvent(.failed(error))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        onEvent(.closed)
        context.fireChannelInactive()
    }
}
