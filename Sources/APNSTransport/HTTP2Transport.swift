/// The HTTP/2 provider API transport: persistent TLS + HTTP/2 connections per credential and
/// environment, a deadline per request and a classified result for every notification. A
/// ServiceLifecycle `Service`: `run()` owns the connections.
///
/// A shell around `HTTP2PoolStateMachine`, which holds every rule of pooling (which connection a
/// request goes to, who waits and until when, which connections open and close, the in-flight
/// window, first use, shutdown): each event goes into the machine under one lock, and the
/// `Action` it returns is carried out by `perform` outside it. What is left here is IO: writing
/// requests on streams, connecting, the deadline timer and the idle period.
import APNSModel
import APNSProviderToken
import Foundation
import Logging
import Metrics
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import ServiceClock
import ServiceLifecycle
import Synchronization

public final class HTTP2Transport: NotificationTransport, Service {
    public let configuration: HTTP2TransportConfiguration
    let logger: Logger
    let eventLoopGroup: any EventLoopGroup
    /// The group's loops, in order: slot `n` connects on loop `n` modulo their count, so a pool's
    /// connections spread over the threads. The group's own `next()` is shared with every other
    /// user of the group (timers, other pools, the admin server), and once gave both
    /// connections of a pool the same loop: that pool's HTTP/2 work then ran on one core.
    let eventLoops: [any EventLoop]
    let tlsContext: NIOSSLContext
    private let tokens: ProviderTokenSource?
    /// The idle period's time (`idlePeriods`), so a test moves a manual clock past it.
    private let clock: any ConsumerClock

    typealias Pool = HTTP2PoolStateMachine<HTTP2Connection, StreamWaiter>

    private struct State {
        var pool: Pool
        /// The consumers that feed this pool, by registration (the machine counts them).
        var windowObservers: [UInt64: @Sendable (Int) -> Bool] = [:]
        var nextObserverID: UInt64 = 0
        /// The last deadline timer scheduled (shutdown cancels it; earlier ones fire harmlessly).
        var timer: Scheduled<Void>?
    }
    private let state: Mutex<State>
    /// Slots whose connection loops `run()` starts.
    private let slotsToOpen: (stream: AsyncStream<Int>, continuation: AsyncStream<Int>.Continuation)

    private let latency: Metrics.Timer
    private let inFlightMeter: Meter

    /// - Parameters:
    ///   - eventLoopGroup: where the connections live; NIO's shared singleton by default.
    ///   - clock: the idle checks' time (`idleConnectionTimeout`); the system's by default.
    /// - Throws: when the TLS material (CA file, client certificate or key) cannot be loaded.
    public init(
        configuration: HTTP2TransportConfiguration,
        logger: Logger,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        clock: any ConsumerClock = SystemConsumerClock()
    ) throws {
        self.configuration = configuration
        self.clock = clock
        var logger = logger
        logger[metadataKey: "apns.host"] = .string(configuration.host)
        logger[metadataKey: "apns.environment"] = .string(configuration.environment.rawValue)
        self.logger = logger
        self.eventLoopGroup = eventLoopGroup
        self.eventLoops = Array(eventLoopGroup.makeIterator())
        self.tlsContext = try configuration.makeTLSContext()
        if case .token(let source) = configuration.authentication { tokens = source } else { tokens = nil }
        self.state = Mutex(
            State(
                pool: Pool(
                    connections: configuration.connections, maxConnections: configuration.maxConnections,
                    streamCap: configuration.maxConcurrentStreamsPerConnection,
                    oneStreamUntilFirstAnswer: configuration.usesTokenAuthentication, poolIdleChecks: configuration.poolIdleChecks,
                    connectOnFirstUse: configuration.connectOnFirstUse,
                    window: InFlightWindow(
                        floor: configuration.inFlightFloor, ceiling: configuration.inFlightCeiling,
                        now: NIODeadline.now().uptimeNanoseconds))))
        self.slotsToOpen = AsyncStream.makeStream()
        let env = [("environment", configuration.environment.rawValue)]
        self.latency = Metrics.Timer(label: "apns_transport_request_duration_seconds", dimensions: env)
        self.inFlightMeter = Meter(label: "apns_transport_in_flight", dimensions: env)
    }

    // MARK: the machine

    /// Feeds one event to the pool's machine and carries out what it returns; the request part
    /// addressed to the caller (`lease`, `park`, `refuse`) is the caller's to handle.
    @discardableResult
    private func feed(_ event: @Sendable (inout Pool) -> Pool.Action) -> Pool.Action {
        let action = state.withLock { event(&$0.pool) }
        perform(action)
        return action
    }

    /// Carries out an action: the only place the machine's decisions become IO.
    private func perform(_ action: Pool.Action) {
        switch action.request {
        case .none, .lease, .park, .refuse: break
        case .resume(let granted): for (waiter, lease) in granted { waiter.granted(.leased(lease)) }
        case .fail(let waiters, let refusal): for waiter in waiters { waiter.granted(.refused(refusal)) }
        }
        switch action.connection {
        case .none, .reconnect: break
        case .open(let slots): for slot in slots { slotsToOpen.continuation.yield(slot) }
        case .close(let connections): for connection in connections { connection.channel.close(promise: nil) }
        }
        switch action.timer {
        case .none: break
        case .schedule(let at):
            let timer = eventLoopGroup.any().scheduleTask(deadline: .uptimeNanoseconds(at)) { [self] in
                _ = feed { $0.deadlinesPassed(now: NIODeadline.now().uptimeNanoseconds) }
            }
            state.withLock { $0.timer = timer }
        case .cancel:
            state.withLock { s -> Scheduled<Void>? in
                defer { s.timer = nil }
                return s.timer
            }?.cancel()
        }
        if let change = action.window { announce(change) }
        tell(action.news)
    }

    private func tell(_ news: Pool.News) {
        switch news {
        case .none: break
        case .opened(let slot, let window):
            logger.info(
                "opening another connection: the in-flight window needs more streams than the open ones allow",
                metadata: ["apns.slot": .stringConvertible(slot), "apns.window": .stringConvertible(window)])
        case .reopened(let connections):
            logger.info("connection pool reopens for a job after being idle", metadata: ["apns.connections": .stringConvertible(connections)])
        case .dormant(let connections):
            logger.info("connection pool idle: its connections close until its next job", metadata: ["apns.connections": .stringConvertible(connections)])
        case .retired:
            logger.info("closing a connection that carried nothing for the idle period")
        }
    }

    /// A new window: each observer hears its share; those that no longer listen are dropped.
    private func announce(_ change: Pool.WindowChange) {
        logger.debug("in-flight window", metadata: ["apns.window": "\(change.target)", "apns.rate": "\(Int(change.rate))"])
        let observers = state.withLock { $0.windowObservers }
        let gone = observers.filter { !$0.value(change.share) }.map(\.key)
        guard !gone.isEmpty else { return }
        state.withLock { s in
            for id in gone { s.windowObservers[id] = nil }
            s.pool.observersGone(gone.count)
        }
    }

    // MARK: sending

    /// The one send path. When a stream is free now, the request is written at once; otherwise
    /// the notification is parked in the machine as a closure until a stream is free or its
    /// deadline passes. Its answer is handled on the connection's event loop, where a resend
    /// (after GOAWAY, or with a renewed token) starts the next attempt the same way: no task
    /// anywhere (see docs/architecture.md, "Execution model per layer").
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
        var action = feed { $0.requestStream() }
        if case .park = action.request {
            // A parked notification costs a closure in the machine's queue, not a task and its
            // stack: at the start of a drain every job of a bundle but the first waits for the
            // first answer (one stream until then).
            let waiter = StreamWaiter { [self] grant in
                granted(grant, notification, deadline: deadline, token: token, renewedAfterExpiry: renewedAfterExpiry, end: end)
            }
            action = feed { $0.park(waiter, deadline: deadline.uptimeNanoseconds) }
        }
        switch action.request {
        case .lease(let lease): granted(.leased(lease), notification, deadline: deadline, token: token, renewedAfterExpiry: renewedAfterExpiry, end: end)
        case .refuse(let refusal): granted(.refused(refusal), notification, deadline: deadline, token: token, renewedAfterExpiry: renewedAfterExpiry, end: end)
        case .none, .park, .resume, .fail: break
        }
    }

    private func granted(
        _ grant: PoolGrant, _ notification: PushNotification, deadline: NIODeadline, token: ProviderToken?, renewedAfterExpiry: Bool,
        end: @escaping SendEnd
    ) {
        switch grant {
        case .leased(let lease):
            write(notification, on: lease, deadline: deadline, token: token, renewedAfterExpiry: renewedAfterExpiry, end: end)
        case .refused(.timedOut): end(.failed(.timeout), nil)
        case .refused(.shutdown): end(.failed(.shutdown), nil)
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

    /// Counts a send as begun; the function returned records its end (metrics, the window, and a
    /// debug line for a notification that got no answer), then passes the result to `completion`.
    private func started(
        id: UUID, target: PushTarget, then completion: @escaping @Sendable (TransportResult) -> Void
    ) -> SendEnd {
        let started = NIODeadline.now().uptimeNanoseconds
        inFlightMeter.increment()
        feed { $0.sendBegan(now: started) }
        return { [self] result, writtenAt in
            inFlightMeter.decrement()
            let now = NIODeadline.now().uptimeNanoseconds
            let rtt = now >= started ? now - started : 0
            latency.recordNanoseconds(Int64(clamping: rtt))
            let roundTrip = writtenAt.map { now >= $0 ? now - $0 : 0 } ?? rtt
            let answered = if case .http = result { true } else { false }
            feed { $0.sendEnded(rtt: roundTrip, answered: answered, now: now) }
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
    private enum DoneOrAgain {
        case done(TransportResult)
        /// Send again with this token (`renewed`: it replaced one APNs reported expired).
        case again(token: ProviderToken?, renewed: Bool)
    }

    /// Gives the stream back and decides what follows an attempt.
    private func afterAttempt(
        _ result: StreamResult, on lease: Pool.Lease, deadline: NIODeadline, token: ProviderToken?, renewedAfterExpiry: Bool
    ) -> DoneOrAgain {
        let answered = if case .answer = result { true } else { false }
        // A stream that ended unanswered on a dead connection: no new stream goes to it, not
        // even the one given back now.
        if !answered && !lease.connection.isActive { feed { $0.draining(slot: lease.slot, generation: lease.generation) } }
        feed { $0.release(lease, answered: answered) }
        switch result {
        case .notProcessed:
            // The server never saw it: send it again on another (or a new) connection.
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

    // MARK: connections

    /// Runs the connection loops the machine opens (the base ones, those the window opens, and
    /// again after idleness) and the idle period, until graceful shutdown or cancellation; then
    /// lets streams in flight finish (each is bounded by its deadline).
    public func run() async throws {
        let (base, most) = state.withLock { ($0.pool.baseConnections, $0.pool.slots.count) }
        logger.info(
            "HTTP/2 transport starting",
            metadata: ["apns.connections": .stringConvertible(base), "apns.maxConnections": .stringConvertible(most)])
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await withTaskGroup(of: Void.self) { group in
                    if most > base || configuration.poolIdleChecks != nil { group.addTask { await self.idlePeriods() } }
                    feed { $0.start() }
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
        feed { $0.shutdown() }
        slotsToOpen.continuation.finish()
    }

    /// Tells the machine each time an idle period passes (`HTTP2PoolStateMachine.idleCheck`),
    /// until the transport is told to stop (what also shuts the pool down: `run`).
    private func idlePeriods() async {
        await Periodic.run(every: configuration.idleConnectionTimeout, on: clock, start: .afterInterval) {
            feed { $0.idleCheck() }
        }
    }

    private func keepConnected(slot: Int) async {
        // A connection that served is replaced at once (after a short floor so a server that
        // accepts and drops cannot spin us); failures back off exponentially. The loop ends when
        // the machine retires the slot.
        let loop = ReconnectLoop(
            backoff: ReconnectBackoff(initial: configuration.reconnectInitialDelay, maximum: configuration.reconnectMaxDelay))
        await loop.run(isShuttingDown: { [self] in !state.withLock { $0.pool.isActive(slot: slot) } }) {
            let generation = state.withLock { $0.pool.connecting(slot: slot) }
            let closed: Pool.Action
            do {
                let connection = try await connect(slot: slot, generation: generation)
                feed { $0.connected(slot: slot, generation: generation, connection: connection) }
                logger.debug("connected", metadata: ["apns.slot": .stringConvertible(slot)])
                // No SETTINGS within the connect timeout: the peer is not an HTTP/2 server we can use.
                await ReconnectLoop.serve(
                    connection.channel, readyWithin: configuration.connectTimeout,
                    isReady: { [self] in state.withLock { $0.pool.settingsArrived(slot: slot, generation: generation) } },
                    notReady: { [logger] in
                        logger.warning("no SETTINGS from the server in time; closing", metadata: ["apns.slot": .stringConvertible(slot)])
                    })
                closed = feed { $0.closed(slot: slot, generation: generation) }
                logger.info("connection closed", metadata: ["apns.slot": .stringConvertible(slot)])
            } catch {
                closed = feed { $0.closed(slot: slot, generation: generation) }
                logger.warning(
                    "connect failed",
                    metadata: ["apns.slot": .stringConvertible(slot), "apns.error": .string(String(describing: error))])
            }
            if case .reconnect(let afterUse) = closed.connection { return afterUse }
            return false
        }
        feed { $0.loopEnded(slot: slot) }
    }

    func connectionEvent(_ event: HTTP2ConnectionEvent, slot: Int, generation: Int) {
        switch event {
        case .settings(let max):
            feed { $0.settings(slot: slot, generation: generation, maxConcurrentStreams: max) }
        case .goaway(let lastStreamID, let errorCode):
            logger.info(
                "GOAWAY from APNs",
                metadata: [
                    "apns.slot": .stringConvertible(slot), "http2.last_stream_id": .stringConvertible(lastStreamID),
                    "http2.error_code": .stringConvertible(errorCode),
                ])
            feed { $0.draining(slot: slot, generation: generation) }
        case .retiring(let lastStreamID):
            logger.info(
                "connection retired before its stream ids run out; a new one replaces it",
                metadata: ["apns.slot": .stringConvertible(slot), "http2.last_stream_id": .stringConvertible(lastStreamID)])
            feed { $0.draining(slot: slot, generation: generation) }
        }
    }
}

extension HTTP2Transport: InFlightWindowReporting {
    public var inFlightWindow: Int { state.withLock { $0.pool.window.target } }

    /// The window's least answered round trip (nanoseconds), nil before the first answer.
    package var leastRoundTrip: UInt64? { state.withLock { $0.pool.window.minimumRTT } }

    public func observeInFlightWindow(_ observer: @escaping @Sendable (Int) -> Bool) {
        state.withLock { s in
            s.windowObservers[s.nextObserverID] = observer
            s.nextObserverID += 1
            s.pool.observerAdded()
        }
    }
}

extension HTTP2Transport: TransportStatusReporting {
    public func connectionStates() -> [TransportConnectionState: Int] {
        state.withLock { $0.pool.connectionStates() }
    }
}

/// What a parked notification is given: a stream, or the reason it gets none.
enum PoolGrant: Sendable {
    case leased(HTTP2Transport.Pool.Lease)
    case refused(HTTP2Transport.Pool.Refusal)
}

/// A notification parked for a stream, with what follows its grant.
struct StreamWaiter: Sendable {
    let granted: @Sendable (PoolGrant) -> Void
}
