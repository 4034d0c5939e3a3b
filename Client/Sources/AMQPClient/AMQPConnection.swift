// The public face of one AMQP connection (with its automatic reconnects): async methods that
// queue commands for the owner thread and await its answer.
import CRabbitMQShim
import Foundation
import Logging
import Synchronization

/// Where a connection stands, for readiness checks and metrics.
public enum AMQPConnectionState: String, Sendable, Hashable {
    /// Opening a socket / logging in (first connect or reconnect).
    case connecting
    case connected
    /// Connected, but the broker refuses publishes (`connection.blocked`: memory or disk alarm);
    /// publishes wait until it unblocks.
    case blocked
    /// Lost; waiting for the next reconnect attempt.
    case disconnected
    /// Closed by `close()`; final.
    case closed
}

/// Message and consumer counts of a queue (`queue.declare` reply).
public struct AMQPQueueInfo: Sendable, Hashable {
    public var name: String
    public var messageCount: UInt32
    public var consumerCount: UInt32

    public init(name: String, messageCount: UInt32, consumerCount: UInt32) {
        self.name = name
        self.messageCount = messageCount
        self.consumerCount = consumerCount
    }
}

/// One connection to RabbitMQ that reconnects by itself (failover list, capped exponential
/// backoff with jitter), re-declares the topology given to `declare(_:)` and restores consumers.
///
/// One lifetime, whoever uses it: `connect()` starts the owner thread and returns once the first
/// connection is up, `close()` ends it, and `whileConnected` is the two around a body, closing
/// whatever happens. Most callers make and connect it in one step (`connect(configuration:logger:)`,
/// `withConnection`). `apns-worker run` makes it first, builds its services on it (a
/// configuration error is reported without touching the broker), then runs its service group
/// `whileConnected`, so the connection closes only after graceful shutdown let every service
/// settle its work. Calls made before `connect()` wait for the connection in the owner thread's
/// queue.
///
/// Operations that need the broker (publish, declare…) fail with `notConnected` while it is
/// reconnecting, and with `connectionLost` when the connection dies while they are in flight:
/// the caller decides whether to retry.
public final class AMQPConnection: Sendable {
    let shared: Mutex<SharedState>
    let wake: OwnerWake
    let configuration: AMQPConfiguration
    let logger: Logger

    /// A connection not connected yet: `connect()` connects it. Throws when the configuration has
    /// no URL or the wake-up descriptor cannot be made.
    public init(configuration: AMQPConfiguration, logger: Logger) throws {
        guard !configuration.urls.isEmpty else { throw AMQPError(.invalidURL, "no AMQP URL given") }
        self.wake = try OwnerWake()
        self.shared = Mutex(SharedState())
        self.configuration = configuration
        self.logger = logger
    }

    /// Starts the connection's owner thread and waits until the first connection is up. Throws
    /// when every URL of the failover list failed once (the thread then stops), and with
    /// `closed` when the connection was connected or closed before; after that first success,
    /// losses are repaired by reconnecting until `close()`.
    public func connect() async throws {
        guard claimStart() else { throw AMQPError(.closed, "the connection was connected or closed before") }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            shared.withLock { $0.firstConnect = continuation }
            startOwnerThread()
        }
    }

    /// A new connection, connected (`init` and `connect()`).
    public static func connect(configuration: AMQPConfiguration, logger: Logger) async throws -> AMQPConnection {
        let connection = try AMQPConnection(configuration: configuration, logger: logger)
        try await connection.connect()
        return connection
    }

    /// Starts the owner thread; `connect()` calls it once.
    private func startOwnerThread() {
        let driver = ConnectionDriver(configuration: configuration, connection: self, logger: logger)
        let thread = Thread { driver.run() }
        thread.stackSize = Self.ownerThreadStackSize(frameMax: configuration.frameMax)
        thread.name = "amqp-\(configuration.connectionName)"
        thread.start()
    }

    /// The owner thread's stack. librabbitmq decodes a content header's tables recursively as the
    /// frame arrives, one level per 5 bytes at least (an array: kind and length), with about
    /// 125 bytes of stack a level (measured with librabbitmq 0.11: 100,000 nested tables need
    /// more than 10 MiB, fit in 12), so up to 25 bytes of stack per frame byte: a 1 MiB frame
    /// nests ~210,000 levels and needs more than 20 MiB (the default is 8). Only what a frame uses is touched; the rest is address space.
    static func ownerThreadStackSize(frameMax: Int) -> Int {
        8 << 20 + 32 * max(4_096, frameMax)
    }

    /// Marks the connection started; true when this call did (it was not started before).
    private func claimStart() -> Bool {
        shared.withLock { state in
            defer { state.started = true }
            return !state.started
        }
    }

    /// Returns once the owner thread has ended (at once if it never started or already ended).
    private func ownerThreadEnded() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ended = shared.withLock { state in
                guard state.started, !state.ended else { return true }
                state.endWaiters.append(continuation)
                return false
            }
            if ended { continuation.resume() }
        }
    }

    /// `connect()`, run `body`, and close whatever happens.
    public func whileConnected<Result>(
        isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> Result
    ) async throws -> Result {
        try await connect()
        do {
            let result = try await body()
            await close()
            return result
        } catch {
            await close()
            throw error
        }
    }

    /// A new connection, `whileConnected` around `body`.
    public static func withConnection<Result>(
        configuration: AMQPConfiguration, logger: Logger,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (AMQPConnection) async throws -> Result
    ) async throws -> Result {
        let connection = try AMQPConnection(configuration: configuration, logger: logger)
        return try await connection.whileConnected { try await body(connection) }
    }

    /// Closes the connection (consumers end, publishes still unconfirmed fail with `closed`) and
    /// waits for the owner thread to finish. Idempotent.
    public func close() async {
        if claimStart() {
            // Never started: it ends here, without a thread; whatever was queued fails as closed.
            let driver = ConnectionDriver(configuration: configuration, connection: self, logger: logger)
            driver.stopRequested = true
            driver.finish()
            return
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            submit(.close(continuation), orElse: { continuation.resume() })
        }
        await ownerThreadEnded()
    }

    public var state: AMQPConnectionState { shared.withLock { $0.state } }

    /// How many times a connection was established (1 after `connect`; +1 per reconnect).
    public var connectionCount: Int { shared.withLock { $0.connectionCount } }

    /// The broker currently connected to, if any (password not included in its description).
    public var connectedURL: AMQPURL? { shared.withLock { $0.connectedURL } }

    // MARK: Topology

    /// Declares exchanges, queues and bindings, in that order, and remembers the plan so it is
    /// declared again after every reconnect. Idempotent: declaring the same plan twice is a no-op
    /// on the broker. A queue or exchange that exists with other arguments fails with
    /// `declarationConflict`, naming it and the argument that differs.
    public func declare(_ plan: TopologyPlan) async throws {
        _ = try await rpc(.declarePlan(plan))
    }

    /// Declares one exchange, durable unless it says otherwise (not remembered for reconnects; see `declare(_:)`).
    public func declareExchange(_ exchange: ExchangeDeclaration) async throws {
        _ = try await rpc(.declareExchange(exchange))
    }

    /// Declares one queue, durable unless it is exclusive (then auto-deleted too); returns its counts.
    @discardableResult
    public func declareQueue(_ queue: QueueDeclaration) async throws -> AMQPQueueInfo {
        guard case .queueInfo(let info) = try await rpc(.declareQueue(queue)) else { throw unexpectedReply() }
        return info
    }

    public func bind(_ binding: BindingDeclaration) async throws {
        _ = try await rpc(.bind(binding))
    }

    /// Deletes a queue; returns how many messages it held.
    @discardableResult
    public func deleteQueue(_ name: String, ifUnused: Bool = false, ifEmpty: Bool = false) async throws -> UInt32 {
        guard case .count(let count) = try await rpc(.deleteQueue(name, ifUnused: ifUnused, ifEmpty: ifEmpty)) else { throw unexpectedReply() }
        return count
    }

    public func deleteExchange(_ name: String, ifUnused: Bool = false) async throws {
        _ = try await rpc(.deleteExchange(name, ifUnused: ifUnused))
    }

    /// Drops every ready message of a queue; returns how many.
    @discardableResult
    public func purgeQueue(_ name: String) async throws -> UInt32 {
        guard case .count(let count) = try await rpc(.purgeQueue(name)) else { throw unexpectedReply() }
        return count
    }

    /// Passive declare: the counts of an existing queue; `channelClosed` with reply code 404
    /// when it does not exist.
    public func inspectQueue(_ name: String) async throws -> AMQPQueueInfo {
        guard case .queueInfo(let info) = try await rpc(.inspectQueue(name)) else { throw unexpectedReply() }
        return info
    }

    // MARK: Messages

    /// `basic.get`: takes the next message of a queue without a consumer, or nil when it is
    /// empty. The message stays unacked until `ack`/`nack`/`reject` (or the connection closes,
    /// which requeues it).
    public func get(queue: String, maxBodySize: Int) async throws -> AMQPDelivery? {
        try await get(queue: queue, maxBodySize: maxBodySize, oversizedDeadLetter: nil)
    }

    /// As `get(queue:maxBodySize:)`; a body over `maxBodySize` is first copied where
    /// `oversizedDeadLetter` says, frame by frame as it arrives, as a consumer's is
    /// (`consume(queue:prefetch:maxBodySize:oversizedDeadLetter:)`): once the broker confirms the
    /// copy, the message comes marked `oversizedBodyDeadLettered`; unmarked when it could not be made.
    public func get(queue: String, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?) async throws -> AMQPDelivery? {
        guard case .delivery(let delivery) = try await rpc(.get(queue, maxBodySize: maxBodySize, oversizedDeadLetter: oversizedDeadLetter))
        else { throw unexpectedReply() }
        return delivery
    }

    /// Publishes on the connection's confirm-mode channel and returns once the broker confirmed
    /// the message (`basic.ack`). Many publishes may be in flight at once (call concurrently):
    /// they are pipelined, not confirmed one by one. Throws `publishReturned` for an unroutable
    /// `mandatory` message, `publishNacked`, `channelClosed` (e.g. 404: no such exchange),
    /// `connectionLost`/`notConnected`. While the broker has blocked the connection, the
    /// publish waits. Once sent, a publish cannot be withdrawn, so it ignores task cancellation.
    public func publish(_ message: AMQPOutboundMessage) async throws {
        if let name = ShortStringNames.overlong(message.exchange, message.routingKey) { throw ShortStringNames.refusal(name) }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            submit(.publish(message, continuation), orElse: { continuation.resume(throwing: AMQPError(.closed, "the connection is closed")) })
        }
    }

    /// Publishes `messages` in order as one command to the owner thread and returns once the
    /// broker has settled every one: nil for a message it confirmed, else the error `publish`
    /// would have thrown for it (a name too long for a short string fails alone, before it is
    /// sent). One wake-up of the owner thread and one resumption for the whole batch, where
    /// publishing each costs both per message. Ignores task cancellation, as `publish` does.
    public func publish(_ messages: [AMQPOutboundMessage]) async -> [AMQPError?] {
        guard !messages.isEmpty else { return [] }
        return await withCheckedContinuation { (continuation: CheckedContinuation<[AMQPError?], Never>) in
            submit(
                .publishBatch(messages, continuation),
                orElse: { continuation.resume(returning: Array(repeating: AMQPError(.closed, "the connection is closed"), count: messages.count)) })
        }
    }

    /// Starts a consumer on a channel of its own with `basic.qos(prefetch)` and manual acks.
    /// While the connection is down, the consumer is registered and starts with the next connection.
    /// A message whose body is larger than `maxBodySize` is delivered without it (its bytes are
    /// read and dropped as they arrive), marked with `oversizedBodySize`: memory per consumer
    /// stays within `prefetch` × `maxBodySize` whatever size a publisher sends.
    ///
    /// With `oversizedDeadLetter`, such a message is first published where that says (its dead
    /// queue, with headers of its own) as its body arrives, one frame at a time on a channel of
    /// its own, so no more of it is held than a frame (contract §4); once the broker confirms
    /// that copy, the message is delivered marked `oversizedBodyDeadLettered`, for the consumer
    /// to ack. When the copy cannot be made (the broker blocks publishing, returns or nacks it),
    /// it is delivered unmarked, as without `oversizedDeadLetter`.
    public func consume(
        queue: String, prefetch: UInt16 = 500, maxBodySize: Int = .max, oversizedDeadLetter: AMQPOversizedDeadLetter?
    ) async throws -> AMQPConsumer {
        try await consume(queue: queue, prefetch: prefetch, maxBodySize: maxBodySize, route: oversizedDeadLetter, cutsBodies: false)
    }

    public func consume(queue: String, prefetch: UInt16 = 500, maxBodySize: Int = .max) async throws -> AMQPConsumer {
        try await consume(queue: queue, prefetch: prefetch, maxBodySize: maxBodySize, route: nil, cutsBodies: false)
    }

    /// `consume`, except that a body larger than `limit` is delivered cut to its first `limit`
    /// bytes (the rest read and dropped as it arrives), marked with `oversizedBodySize`: the
    /// operator listings show the start of every body and hold at most `limit` bytes of each.
    public func consume(queue: String, prefetch: UInt16, cuttingBodiesAt limit: Int) async throws -> AMQPConsumer {
        try await consume(queue: queue, prefetch: prefetch, maxBodySize: limit, route: nil, cutsBodies: true)
    }

    /// Replaces `old` with a consumer of the same queue and settings but `prefetch`, on old's
    /// channel: `basic.qos` then `basic.consume` there, then `basic.cancel` of old (RabbitMQ
    /// applies a prefetch only to consumers started after it; the in-flight window). Old's
    /// sequence ends after the deliveries it already received, which are settled as before on
    /// the same channel; deliveries the broker still sends for old's tag go back to the queue.
    /// The channel is never closed for it: a quorum queue may apply acks sent just before a
    /// close after it, and deliver those jobs again (docs/decisions.md, "The in-flight window").
    /// `maxBodySize` and `oversizedDeadLetter` are the new consumer's, as passed (they may differ
    /// from old's); a consumer that cut bodies (`consume(queue:prefetch:cuttingBodiesAt:)`) is
    /// replaced by one that cuts them at `maxBodySize`.
    public func consume(
        replacing old: AMQPConsumer, prefetch: UInt16, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?
    ) async throws -> AMQPConsumer {
        try await consume(
            queue: old.queue, prefetch: prefetch, maxBodySize: maxBodySize, route: oversizedDeadLetter, cutsBodies: false, replacing: old.id)
    }

    private func consume(
        queue: String, prefetch: UInt16, maxBodySize: Int, route: AMQPOversizedDeadLetter?, cutsBodies: Bool, replacing: Int? = nil
    ) async throws -> AMQPConsumer {
        if let name = ShortStringNames.overlong(queue) { throw ShortStringNames.refusal(name) }
        let buffer = DeliveryBuffer()
        let (id, tag) = shared.withLock { state -> (Int, String) in
            state.nextConsumerID += 1
            return (state.nextConsumerID, "apnsw-\(UUID().uuidString.prefix(8).lowercased())-\(state.nextConsumerID)")
        }
        let request = ConsumerRequest(
            id: id, queue: queue, prefetch: prefetch, maxBodySize: maxBodySize, oversizedDeadLetter: route, tag: tag,
            buffer: buffer, cutsBodies: cutsBodies, replacing: replacing)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            submit(.consume(request, continuation), orElse: { continuation.resume(throwing: AMQPError(.closed, "the connection is closed")) })
        }
        return AMQPConsumer(queue: queue, consumerTag: tag, id: id, buffer: buffer, connection: self)
    }

    /// Acknowledges a delivery from any thread, without a task (`ack` in a task is the same).
    /// `.stale` when its channel is gone (see `AMQPSettlement`). Does not wait for the broker
    /// (AMQP acks have no reply).
    @discardableResult
    public func ackNow(_ delivery: AMQPDelivery) -> AMQPSettlement {
        settle(delivery.tag, .ack)
    }

    /// Negatively acknowledges a delivery; `requeue: false` dead-letters or drops it.
    @discardableResult
    public func nack(_ delivery: AMQPDelivery, requeue: Bool) async -> AMQPSettlement {
        settle(delivery.tag, .nack(requeue: requeue))
    }

    /// Rejects a delivery (like `nack` for one message).
    @discardableResult
    public func reject(_ delivery: AMQPDelivery, requeue: Bool) async -> AMQPSettlement {
        settle(delivery.tag, .reject(requeue: requeue))
    }

    // MARK: Plumbing

    /// Settlements do not wait for the owner thread (they are the hot path of consuming): a
    /// delivery whose channel generation is no longer open is dropped here as `.stale`; the
    /// others are queued, and the owner thread checks the generation again before sending, so
    /// a tag is never sent on a channel that did not deliver it. `.settled` therefore means
    /// "handed to the live channel", as for any ack still in a socket buffer when a connection dies.
    ///
    /// An ack wakes a sleeping owner thread only as `WakeDecision.ackQueued` says.
    func settle(_ tag: AMQPDeliveryTag, _ kind: SettlementKind) -> AMQPSettlement {
        let (accepted, wake): (Bool, Bool) = shared.withLock { state in
            guard !state.terminated, state.openChannels[tag.channel] == tag.generation else { return (false, false) }
            state.commands.append(.settle(tag, kind))
            if case .ack = kind { return (true, state.wake.ackQueued()) }
            return (true, state.wake.commandQueued())
        }
        if wake { self.wake.signal() }
        if !accepted { logger.debug("AMQP settlement of a stale delivery dropped", metadata: ["amqp.delivery_tag": "\(tag)"]) }
        return accepted ? .settled : .stale
    }

    func cancelConsumer(id: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            submit(.cancelConsumer(id, continuation), orElse: { continuation.resume() })
        }
    }

    func releaseConsumer(id: Int, handingBack: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            submit(.releaseConsumer(id, handingBack: handingBack, continuation), orElse: { continuation.resume() })
        }
    }

    private func rpc(_ request: RPCRequest) async throws -> RPCResult {
        if let name = request.overlongName { throw ShortStringNames.refusal(name) }
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<RPCResult, any Error>) in
            submit(.rpc(request, continuation), orElse: { continuation.resume(throwing: AMQPError(.closed, "the connection is closed")) })
        }
    }

    private func unexpectedReply() -> AMQPError { AMQPError(.library, "unexpected reply from the connection thread") }

    /// Queues a command for the owner thread and wakes it if it sleeps; runs `orElse` instead
    /// when the thread has ended.
    private func submit(_ command: Command, orElse rejected: () -> Void) {
        let outcome: (accepted: Bool, wake: Bool) = shared.withLock { state in
            guard !state.terminated else { return (false, false) }
            state.commands.append(command)
            return (true, state.wake.commandQueued())
        }
        if !outcome.accepted { rejected() }
        if outcome.wake { wake.signal() }
    }
}

/// State shared by async callers and the owner thread, always under `AMQPConnection.shared`.
struct SharedState: ~Copyable {
    var commands: [Command] = []
    /// When a queued command must wake the owner thread (`OwnerWake.swift`).
    var wake = WakeDecision()
    /// The owner thread has ended: commands are refused.
    var terminated = false
    var state: AMQPConnectionState = .connecting
    var connectionCount = 0
    var connectedURL: AMQPURL?
    /// Channel number → generation of the channels open now (see `AMQPDeliveryTag`).
    var openChannels: [UInt16: UInt64] = [:]
    var nextConsumerID = 0
    var firstConnect: CheckedContinuation<Void, any Error>?
    /// The owner thread was started by `connect()`, or `close()` ended a connection never
    /// connected; either happens once.
    var started = false
    /// The owner thread has finished; `endWaiters` were resumed.
    var ended = false
    var endWaiters: [CheckedContinuation<Void, Never>] = []
}

enum SettlementKind: Sendable {
    case ack
    case nack(requeue: Bool)
    case reject(requeue: Bool)
}

struct ConsumerRequest: Sendable {
    var id: Int
    var queue: String
    var prefetch: UInt16
    var maxBodySize: Int
    /// Where a delivery over `maxBodySize` is copied, frame by frame, before it is handed over.
    var oversizedDeadLetter: AMQPOversizedDeadLetter? = nil
    var tag: String
    var buffer: DeliveryBuffer
    /// A body over `maxBodySize` keeps its first `maxBodySize` bytes instead of none.
    var cutsBodies = false
    /// The consumer this one replaces on its channel (`consume(replacing:prefetch:maxBodySize:oversizedDeadLetter:)`).
    var replacing: Int? = nil
}

enum RPCRequest: Sendable {
    case declarePlan(TopologyPlan)
    case declareExchange(ExchangeDeclaration)
    case declareQueue(QueueDeclaration)
    case bind(BindingDeclaration)
    case deleteQueue(String, ifUnused: Bool, ifEmpty: Bool)
    case deleteExchange(String, ifUnused: Bool)
    case purgeQueue(String)
    case inspectQueue(String)
    case get(String, maxBodySize: Int, oversizedDeadLetter: AMQPOversizedDeadLetter?)
}

enum RPCResult: Sendable {
    case done
    case queueInfo(AMQPQueueInfo)
    case count(UInt32)
    case delivery(AMQPDelivery?)
}

enum Command: Sendable {
    case publish(AMQPOutboundMessage, CheckedContinuation<Void, any Error>)
    /// Many publishes, resumed once with every one's result (`publish(_:)` of an array).
    case publishBatch([AMQPOutboundMessage], CheckedContinuation<[AMQPError?], Never>)
    case settle(AMQPDeliveryTag, SettlementKind)
    case rpc(RPCRequest, CheckedContinuation<RPCResult, any Error>)
    case consume(ConsumerRequest, CheckedContinuation<Void, any Error>)
    case cancelConsumer(Int, CheckedContinuation<Void, Never>)
    /// The consumer's owner is done with it (`AMQPConsumer.finish(handingBack:)`).
    case releaseConsumer(Int, handingBack: Bool, CheckedContinuation<Void, Never>)
    /// With the continuation of `close()`, resumed once closed.
    case close(CheckedContinuation<Void, Never>)

    /// What the command writes without waiting for the broker: the number of publishes
    /// (settlements write an ack but no publish), or nil when it waits for a reply to what it
    /// wrote (an RPC, a consume, a cancel, a close).
    var publishesWithoutWaiting: Int? {
        switch self {
        case .publish: 1
        case .publishBatch(let messages, _): messages.count
        case .settle: 0
        case .rpc, .consume, .cancelConsumer, .releaseConsumer, .close: nil
        }
    }

    /// Whether a pass of commands (their `publishesWithoutWaiting`) is worth holding in the
    /// kernel until it ends (`ConnectionDriver.serve`): at least two publishes, each pushed
    /// through TCP on its own otherwise, and nothing that waits for the answer to what it wrote,
    /// which a held write would delay. A pass of one publish or of acks alone (coalesced into one
    /// frame) gains nothing from the two extra system calls.
    static func worthCorking(_ passes: some Sequence<Int?>) -> Bool {
        var publishes = 0
        for count in passes {
            guard let count else { return false }
            publishes += count
        }
        return publishes >= 2
    }
}
