/// The HTTP/2 provider API transport: persistent TLS + HTTP/2 connections per credential and
/// environment (`connections` kept open, more up to `maxConnections` opened when the in-flight
/// window needs their streams and closed when idle), each carrying as many concurrent streams as
/// the server allows, replaced when they go away, with a deadline per request and a classified
/// result for every notification. A ServiceLifecycle `Service`: `run()` owns the connections.
import APNSModel
import APNSProviderToken
import CancellableWait
import Foundation
import Logging
import Metrics
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization

public final class HTTP2Transport: NotificationTransport, Service {
    public let configuration: HTTP2TransportConfiguration
    private let logger: Logger
    private let eventLoopGroup: any EventLoopGroup
    private let tlsContext: NIOSSLContext
    private let tokens: ProviderTokenSource?

    fileprivate typealias Pool = ConnectionPoolStateMachine<HTTP2Connection, StreamWaiter>
    fileprivate enum PoolGrant: Sendable {
        case leased(Pool.Lease)
        case timedOut
        case shutdown
    }

    private struct State {
        var pool: Pool
        var nextWaiterID: UInt64 = 0
        /// What the pool keeps in flight, sized to the round trip (issue 38).
        var window: InFlightWindow
        /// The consumers that feed this pool, by registration: each takes an even share.
        var windowObservers: [UInt64: @Sendable (Int) -> Bool] = [:]
        var nextObserverID: UInt64 = 0
    }
    private let state: Mutex<State>
    private let firstUse: FirstUseGate
    /// Slots the window needs opened, for `run()` to start their connection loops.
    private let slotsToOpen: (stream: AsyncStream<Int>, continuation: AsyncStream<Int>.Continuation)

    private let latency: Metrics.Timer
    private let inFlightMeter: Meter

    /// - Parameters:
    ///   - eventLoopGroup: where the connections live; NIO's shared singleton by default.
    /// - Throws: when the TLS material (CA file, client certificate or key) cannot be loaded.
    public init(
        configuration: HTTP2TransportConfiguration,
        logger: Logger,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws {
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "apns.host"] = .string(configuration.host)
        logger[metadataKey: "apns.environment"] = .string(configuration.environment.rawValue)
        self.logger = logger
        self.eventLoopGroup = eventLoopGroup
        self.tlsContext = try configuration.makeTLSContext()
        if case .token(let source) = configuration.authentication { tokens = source } else { tokens = nil }
        self.firstUse = FirstUseGate(open: !configuration.connectOnFirstUse)
        self.state = Mutex(
            State(
                pool: Pool(
                    connections: configuration.connections, maxConnections: configuration.maxConnections,
                    streamCap: configuration.maxConcurrentStreamsPerConnection,
                    oneStreamUntilFirstAnswer: configuration.usesTokenAuthentication, poolIdleChecks: configuration.poolIdleChecks),
                window: InFlightWindow(
                    floor: configuration.inFlightFloor, ceiling: configuration.inFlightCeiling,
                    now: NIODeadline.now().uptimeNanoseconds)))
        self.slotsToOpen = AsyncStream.makeStream()
        let env = [("environment", configuration.environment.rawValue)]
        self.latency = Metrics.Timer(label: "apns_transport_request_duration_seconds", dimensions: env)
        self.inFlightMeter = Meter(label: "apns_transport_in_flight", dimensions: env)
    }

    // MARK: sending

    /// The one send path. When a stream is free now, the request is written at once; otherwise
    /// the notification waits in the pool's queue as a closure. Its answer is handled on the
    /// connection's event loop, where a resend (after GOAWAY, or with a renewed token) starts
    /// the next attempt the same way: no task anywhere (see docs/architecture.md, "Execution
    /// model per layer").
    public func send(_ notification: PushNotification, completion: @escaping @Sendable (TransportResult) -> Void) {
        let end = started(id: notification.id, target: notification.target, then: completion)
        let token: ProviderToken?
        switch firstToken() {
        case .success(let t): token = t
        case .failure(let failure): return end(.failed(failure), nil)
        }
        let deadline = NIODeadline.now() + configuration.requestTimeout.timeAmount
        attempt(notification, deadline: deadline, token: token, renewedAfterExpiry: false, end: end)
    }

    /// One attempt: a stream leased (at once or when one is given back), the request written on
    /// it, and what follows its answer.
    private func attempt(
        _ notification: PushNotification, deadline: NIODeadline, token: ProviderToken?, renewedAfterExpiry: Bool,
        end: @escaping SendEnd
    ) {
        // The hot path: a stream is free and nobody waits; no closure, waiter or timer is made.
        if let lease = state.withLock({ $0.pool.leaseIfFree() }) {
            return write(notification, on: lease, deadline: deadline, token: token, renewedAfterExpiry: renewedAfterExpiry, end: end)
        }
        waitForStream(deadline: deadline) { [self] grant in
            switch grant {
            case .leased(let lease):
                write(notification, on: lease, deadline: deadline, token: token, renewedAfterExpiry: renewedAfterExpiry, end: end)
            case .timedOut: end(.failed(.timeout), nil)
            case .shutdown: end(.failed(.shutdown), nil)
            }
        }
    }

    /// Writes the request on a leased stream; its answer is handled on the connection's event loop.
    private func write(
        _ notification: PushNotification, on lease: Pool.Lease, deadline: NIODeadline, token: ProviderToken?,
        renewedAfterExpiry: Bool, end: @escaping SendEnd
    ) {
        let request = HTTP2Request(notification: notification, authority: configuration.host, authorization: token?.authorization)
        let written = NIODeadline.now().uptimeNanoseconds
        lease.connection.send(
            StreamRequest(request: request, deadline: deadline) { [self] answered in
                switch afterAttempt(answered, on: lease, deadline: deadline, token: token, renewedAfterExpiry: renewedAfterExpiry) {
                case .done(let result):
                    end(result, written)
                case .again(let token, let renewed):
                    attempt(notification, deadline: deadline, token: token, renewedAfterExpiry: renewed, end: end)
                }
            })
    }

    /// How a send ends: its result, and when the last attempt was written on a stream, the
    /// monotonic time of that write (for the window's round trip, which leaves out the wait).
    private typealias SendEnd = @Sendable (TransportResult, _ writtenAt: UInt64?) -> Void

    /// Counts a send as begun; the function returned records its end (metrics, and a debug line
    /// for a notification that got no answer), then passes the result to `completion`.
    private func started(
        id: UUID, target: PushTarget, then completion: @escaping @Sendable (TransportResult) -> Void
    ) -> SendEnd {
        let started = NIODeadline.now().uptimeNanoseconds
        firstUse.open()
        inFlightMeter.increment()
        // A pool closed for idleness opens again with its next job.
        let reopen = state.withLock { s -> [Int] in
            s.window.sent()
            return s.pool.dormant ? s.pool.reopen() : []
        }
        if !reopen.isEmpty {
            logger.info("connection pool reopens for a job after being idle", metadata: ["apns.connections": .stringConvertible(reopen.count)])
            for slot in reopen { slotsToOpen.continuation.yield(slot) }
        }
        return { [self] result, writtenAt in
            inFlightMeter.decrement()
            let now = NIODeadline.now().uptimeNanoseconds
            let rtt = now >= started ? now - started : 0
            latency.recordNanoseconds(Int64(clamping: rtt))
            let roundTrip = writtenAt.map { now >= $0 ? now - $0 : 0 } ?? rtt
            windowEnded(rtt: roundTrip, result: result, now: now)
            if case .failed(let failure) = result {
                logger.debug(
                    "notification not answered",
                    metadata: [
                        "apns.id": .string(id.uuidString.lowercased()),
                        "apns.target": .string(target.redacted), "apns.failure": .string(failure.description),
                    ])
            }
            completion(result)
        }
    }

    /// One send ended: the window measures it, and observers hear of a new window.
    private func windowEnded(rtt: UInt64, result: TransportResult, now: UInt64) {
        var answered = false
        if case .http = result { answered = true }
        let (changed, rate, observers, open) = state.withLock { s -> (Int?, Double, [UInt64: @Sendable (Int) -> Bool], Int?) in
            let changed = s.window.ended(rtt: rtt, answered: answered, now: now, streamCapacity: s.pool.streamCapacity)
            // More streams wanted than the open connections allow (notifications wait for one).
            let open = changed != nil || s.pool.waiting > 0 ? s.pool.slotToOpen(wanted: s.window.target) : nil
            return (changed, s.window.rate ?? 0, changed == nil ? [:] : s.windowObservers, open)
        }
        if let open { openSlot(open) }
        guard let changed else { return }
        logger.debug("in-flight window", metadata: ["apns.window": "\(changed)", "apns.rate": "\(Int(rate))"])
        // Bundles sharing the pool split its window: together they take what it carries.
        let share = (changed + observers.count - 1) / max(1, observers.count)
        let gone = observers.filter { !$0.value(share) }.map(\.key)
        if !gone.isEmpty { state.withLock { s in for id in gone { s.windowObservers[id] = nil } } }
    }

    private func openSlot(_ slot: Int) {
        logger.info(
            "opening another connection: the in-flight window needs more streams than the open ones allow",
            metadata: ["apns.slot": .stringConvertible(slot), "apns.window": .stringConvertible(inFlightWindow)])
        slotsToOpen.continuation.yield(slot)
    }

    private enum FirstToken {
        case success(ProviderToken?)
        case failure(TransportFailure)
    }

    private func firstToken() -> FirstToken {
        guard let tokens else { return .success(nil) }
        do { return .success(try tokens.token()) } catch {
            return .failure(.connectFailed("cannot sign a provider token: \(error)"))
        }
    }

    /// What follows one attempt on one stream.
    private enum NextStep {
        case done(TransportResult)
        /// Send again with this token (`renewed`: it replaced one APNs reported expired).
        case again(token: ProviderToken?, renewed: Bool)
    }

    /// Gives the stream back and decides what follows an attempt.
    private func afterAttempt(
        _ result: StreamResult, on lease: Pool.Lease, deadline: NIODeadline, token: ProviderToken?, renewedAfterExpiry: Bool
    ) -> NextStep {
        var answered = false
        if case .answer = result { answered = true }
        release(lease, answered: answered)
        switch result {
        case .notProcessed:
            // The server never saw it: send it again on another (or a new) connection.
            if !lease.connection.isActive { markDraining(lease) }
            if NIODeadline.now() >= deadline { return .done(.failed(.goaway)) }
            return .again(token: token, renewed: renewedAfterExpiry)
        case .answer(let answer) where answer.reason == .expiredProviderToken && !renewedAfterExpiry:
            // Once, with a newer token (renewed now or by another request meanwhile); resending
            // the refused one could only be refused again, and then the worker holds the
            // bundle (contract §4).
            guard let tokens, let rejected = token, let newer = try? tokens.expired(rejected), newer != rejected else {
                return .done(.http(answer))
            }
            logger.info("APNs reported ExpiredProviderToken; sending again with a renewed token")
            return .again(token: newer, renewed: true)
        case .answer(let answer):
            return .done(.http(answer))
        case .failed(let failure):
            return .done(.failed(failure))
        }
    }

    // MARK: the pool under its lock

    /// Waits for a stream without a task: `granted` runs once, with a lease (at once when one is
    /// free, else when one is given back), `.timedOut` at `deadline`, or `.shutdown`. A waiting
    /// notification costs a closure in the pool's queue and a timer, not a task and its stack:
    /// at the start of a drain every job of a bundle but the first waits for the first answer
    /// (one stream until then), which made those tasks most of a bundle's peak memory (issue 30,
    /// docs/benchmarks.md).
    private func waitForStream(deadline: NIODeadline, granted: @escaping @Sendable (PoolGrant) -> Void) {
        let timer = WaitTimer()
        let waiter = StreamWaiter { grant in
            timer.cancel()
            granted(grant)
        }
        let (id, action) = state.withLock { s -> (UInt64, Pool.AcquireAction) in
            s.nextWaiterID += 1
            return (s.nextWaiterID, s.pool.acquire(id: s.nextWaiterID, waiter: waiter))
        }
        switch action {
        case .leased(let lease): granted(.leased(lease))
        case .shutdown: granted(.shutdown)
        case .wait:
            timer.start(eventLoopGroup.any().scheduleTask(deadline: deadline) { [self] in giveUp(waiter: id, with: .timedOut) })
        }
    }

    private func giveUp(waiter id: UInt64, with grant: PoolGrant) {
        state.withLock { $0.pool.removeWaiter(id: id) }?.resume(returning: grant)
    }

    private func release(_ lease: Pool.Lease, answered: Bool) {
        let dispatch = state.withLock { $0.pool.release(lease, answered: answered) }
        carryOut(dispatch)
    }

    private func markDraining(_ lease: Pool.Lease) {
        mutatePool { $0.draining(slot: lease.slot, generation: lease.generation) }
    }

    private func carryOut(_ dispatch: Pool.Dispatch) {
        for (waiter, lease) in dispatch.resume { waiter.resume(returning: .leased(lease)) }
        for connection in dispatch.close { connection.channel.close(promise: nil) }
    }

    /// Runs `body` on the pool under the lock. (The `apns_transport_connections` gauge is
    /// sampled from `connectionStates()` by the admin surface, which knows the bundle.)
    private func mutatePool<R: Sendable>(_ body: @Sendable (inout Pool) -> R) -> R {
        state.withLock { body(&$0.pool) }
    }

    // MARK: connections

    /// Keeps `configuration.connections` connections open, and those the window opens, until
    /// graceful shutdown or cancellation; then lets streams in flight finish (each is bounded by
    /// its deadline).
    public func run() async throws {
        let (base, most) = state.withLock { ($0.pool.baseConnections, $0.pool.slots.count) }
        logger.info(
            "HTTP/2 transport starting",
            metadata: ["apns.connections": .stringConvertible(base), "apns.maxConnections": .stringConvertible(most)])
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await withTaskGroup(of: Void.self) { group in
                    for slot in 0..<base {
                        group.addTask { await self.keepConnected(slot: slot) }
                    }
                    if most > base || configuration.poolIdleChecks != nil { group.addTask { await self.closeIdleConnections() } }
                    // Ends with `shutdown()`.
                    for await slot in slotsToOpen.stream {
                        group.addTask { await self.keepConnected(slot: slot) }
                    }
                }
            } onGracefulShutdown: {
                self.shutdown()
            }
        } onCancel: {
            self.shutdown()
        }
        logger.info("HTTP/2 transport stopped")
    }

    private func shutdown() {
        slotsToOpen.continuation.finish()
        let (waiters, close) = mutatePool { $0.beginShutdown() }
        for waiter in waiters { waiter.resume(returning: .shutdown) }
        for connection in close { connection.channel.close(promise: nil) }
    }

    private var isShuttingDown: Bool { state.withLock { $0.pool.shuttingDown } }

    /// Once per idle period: connections opened on demand that carried nothing for a whole
    /// period are closed (`ConnectionPoolStateMachine.idleCheck`); the base ones too once the
    /// whole pool carried nothing for `poolIdleTimeout`.
    private func closeIdleConnections() async {
        while !isShuttingDown {
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: self.configuration.idleConnectionTimeout) }
            } catch {
                return
            }
            let (close, dormant) = mutatePool { pool -> ([HTTP2Connection], Bool) in
                let wasDormant = pool.dormant
                return (pool.idleCheck(), !wasDormant && pool.dormant)
            }
            if dormant {
                logger.info("connection pool idle: its connections close until its next job", metadata: ["apns.connections": .stringConvertible(close.count)])
            } else if !close.isEmpty {
                logger.info("closing a connection that carried nothing for the idle period")
            }
            for connection in close { connection.channel.close(promise: nil) }
        }
    }

    private func keepConnected(slot: Int) async {
        // A connection that served is replaced at once (after a short floor so a server that
        // accepts and drops cannot spin us); failures back off exponentially. A slot opened on
        // demand ends its loop when it is retired idle.
        let loop = ReconnectLoop(
            backoff: ReconnectBackoff(initial: configuration.reconnectInitialDelay, maximum: configuration.reconnectMaxDelay))
        mutatePool { $0.looping(slot: slot, true) }
        defer { mutatePool { $0.looping(slot: slot, false) } }
        await loop.run(after: firstUse, isShuttingDown: { [self] in !state.withLock { $0.pool.isActive(slot: slot) } }) {
            let generation = mutatePool { $0.connecting(slot: slot) }
            do {
                let connection = try await connect(slot: slot, generation: generation)
                carryOut(mutatePool { $0.connected(slot: slot, generation: generation, connection: connection) })
                logger.debug("connected", metadata: ["apns.slot": .stringConvertible(slot)])
                // No SETTINGS within the connect timeout: the peer is not an HTTP/2 server we can use.
                await ReconnectLoop.serve(
                    connection.channel, readyWithin: configuration.connectTimeout,
                    isReady: { [self] in state.withLock { $0.pool.settingsArrived(slot: slot, generation: generation) } },
                    notReady: { [logger] in
                        logger.warning("no SETTINGS from the server in time; closing", metadata: ["apns.slot": .stringConvertible(slot)])
                    })
                let wasUsed = mutatePool { $0.closed(slot: slot, generation: generation) }
                logger.info("connection closed", metadata: ["apns.slot": .stringConvertible(slot)])
                return wasUsed
            } catch {
                _ = mutatePool { $0.closed(slot: slot, generation: generation) }
                logger.warning(
                    "connect failed",
                    metadata: ["apns.slot": .stringConvertible(slot), "apns.error": .string(String(describing: error))])
                return false
            }
        }
    }

    private func connect(slot: Int, generation: Int) async throws -> HTTP2Connection {
        let tlsContext = self.tlsContext
        let host = configuration.host
        let pingInterval = configuration.pingInterval.timeAmount
        let bootstrap = ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(configuration.connectTimeout.timeAmount)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(ClientTLS.handler(context: tlsContext, host: host))
                    try Self.addHTTP2Handlers(to: sync, pingInterval: pingInterval) { [self] event in
                        connectionEvent(event, slot: slot, generation: generation)
                    }
                }
            }
        // connect(host:port:) resolves the name afresh for every connection.
        let channel = try await bootstrap.connect(host: host, port: configuration.port).get()
        return try await channel.eventLoop.submit {
            HTTP2Connection(channel: channel, handler: try channel.pipeline.syncOperations.handler(type: HTTP2ConnectionHandler.self))
        }.get()
    }

    /// The handlers of a connection above TLS, bottom to top: writes gathered into TLS records,
    /// flushes held for a batch, NIOHTTP2, and the APNs protocol work.
    static func addHTTP2Handlers(
        to sync: ChannelPipeline.SynchronousOperations, pingInterval: TimeAmount,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) throws {
        try sync.addHandler(WriteGatheringHandler())
        let heldFlush = HeldFlushHandler()
        try sync.addHandler(heldFlush)
        try sync.addHandler(
            NIOHTTP2Handler(
                mode: .client,
                initialSettings: [
                    HTTP2Setting(parameter: .enablePush, value: 0),
                    HTTP2Setting(parameter: .maxHeaderListSize, value: 16 * 1024),
                ],
                // The header names we send are constants in the right order
                // (`HTTP2Request`), and of Apple's answers we read only `:status` and
                // `apns-id`, each checked where it is read: checking every block
                // both ways was about 5 % of the worker's CPU on the profile.
                headerBlockValidation: .disabled,
                // Our content-length is the body we write, by construction; an
                // answer is read whole, to END_STREAM, whatever it declares.
                contentLengthValidation: .disabled))
        try sync.addHandler(HTTP2ConnectionHandler(pingInterval: pingInterval, heldFlush: heldFlush, onEvent: onEvent))
    }

    private func connectionEvent(_ event: HTTP2ConnectionEvent, slot: Int, generation: Int) {
        switch event {
        case .settings(let max):
            carryOut(mutatePool { $0.settings(slot: slot, generation: generation, maxConcurrentStreams: max) })
            // Ready: if the window still wants more streams, the next connection may open.
            if let open = state.withLock({ $0.pool.waiting > 0 ? $0.pool.slotToOpen(wanted: $0.window.target) : nil }) {
                openSlot(open)
            }
        case .goaway(let lastStreamID, let errorCode):
            logger.info(
                "GOAWAY from APNs",
                metadata: [
                    "apns.slot": .stringConvertible(slot), "http2.last_stream_id": .stringConvertible(lastStreamID),
                    "http2.error_code": .stringConvertible(errorCode),
                ])
            mutatePool { $0.draining(slot: slot, generation: generation) }
        case .retiring(let lastStreamID):
            logger.info(
                "connection retired before its stream ids run out; a new one replaces it",
                metadata: ["apns.slot": .stringConvertible(slot), "http2.last_stream_id": .stringConvertible(lastStreamID)])
            mutatePool { $0.draining(slot: slot, generation: generation) }
        }
    }
}

extension HTTP2Transport: InFlightWindowReporting {
    public var inFlightWindow: Int { state.withLock { $0.window.target } }

    /// The window's least answered round trip (nanoseconds), nil before the first answer.
    package var leastRoundTrip: UInt64? { state.withLock { $0.window.minimumRTT } }

    public func observeInFlightWindow(_ observer: @escaping @Sendable (Int) -> Bool) {
        state.withLock { s in
            s.windowObservers[s.nextObserverID] = observer
            s.nextObserverID += 1
        }
    }
}

extension HTTP2Transport: TransportStatusReporting {
    public func connectionStates() -> [TransportConnectionState: Int] {
        let idle = !firstUse.isOpen
        return state.withLock { s in
            var counts = Dictionary(uniqueKeysWithValues: TransportConnectionState.allCases.map { ($0, 0) })
            if idle {
                counts[s.pool.shuttingDown ? .closed : .idle] = s.pool.count(.down)
                return counts
            }
            for slot in s.pool.slots {
                let reported: TransportConnectionState
                switch slot.state {
                // A slot the window has not opened (or closed idle) is not down: nothing needs it.
                case .down where !slot.active && !s.pool.shuttingDown, .draining where !slot.active && !s.pool.shuttingDown:
                    reported = .idle
                case .down: reported = s.pool.shuttingDown ? .closed : .backingOff
                case .connecting: reported = .connecting
                case .ready: reported = .ready
                // After a GOAWAY a connection only finishes its streams and is then replaced:
                // it carries no new notifications, like one waiting to reconnect.
                case .draining: reported = .backingOff
                }
                counts[reported, default: 0] += 1
            }
            return counts
        }
    }
}

/// A notification waiting for a stream, with what follows its lease.
fileprivate struct StreamWaiter: Sendable {
    let granted: @Sendable (HTTP2Transport.PoolGrant) -> Void

    func resume(returning grant: HTTP2Transport.PoolGrant) { granted(grant) }
}

/// The deadline timer of one wait, cancelled when the wait ends, even when it ends
/// (another thread gave back a stream) before the timer is started.
private final class WaitTimer: Sendable {
    private let state = Mutex<(ended: Bool, scheduled: Scheduled<Void>?)>((false, nil))

    func start(_ scheduled: Scheduled<Void>) {
        let ended = state.withLock { s -> Bool in
            if !s.ended { s.scheduled = scheduled }
            return s.ended
        }
        if ended { scheduled.cancel() }
    }

    func cancel() {
        state.withLock { s -> Scheduled<Void>? in
            s.ended = true
            defer { s.scheduled = nil }
            return s.scheduled
        }?.cancel()
    }
}
