import APNSModel

/// The whole pool of one `HTTP2Transport` (credential + environment) as a value, with no IO, no
/// lock and no clock of its own (in the manner of postgres-nio's `PoolStateMachine` and the
/// project's `ConsumerStateMachine`): every event is a mutating call, given the monotonic time in
/// nanoseconds when it needs one, and returns one `Action` that the transport carries out. Generic
/// over the connection and the parked request, so tests drive it with plain values
/// (`HTTP2PoolStateMachineTests`, `HTTP2PoolMachinePairTests`, `HTTP2PoolModelTests`).
///
/// The rules, each kept here and nowhere else:
/// - **streams**: a request gets a stream on the least busy ready connection with one free,
///   never more on a connection than the server's SETTINGS_MAX_CONCURRENT_STREAMS and our
///   `streamCap` allow, and with token authentication one until the connection's first answer
///   (Apple validates the first token before it takes more). Nobody overtakes a parked request;
///   parked requests get streams in the order they parked.
/// - **deadlines**: a parked request is answered by a stream or by `timedOut` once its deadline
///   has passed: the machine asks for one timer at the earliest deadline (`TimerAction`) and
///   answers every request due when it fires (`deadlinesPassed`).
/// - **first use**: with `connectOnFirstUse` no connection opens before the first send (a bundle's
///   transport for the environment its jobs seldom ask for).
/// - **connections**: the `baseConnections` slots are kept connected; one more, up to the pool's
///   size, opens when the in-flight window wants more streams than the active connections carry,
///   one at a time and only once each active one is ready with its real limit known. A slot
///   opened so that carried nothing for two idle checks in a row is retired; with
///   `poolIdleChecks`, a pool that carried nothing for that many checks closes every connection
///   (`dormant`) and its next send opens the base slots again. A slot's connection loop is
///   started only by an `open` action, never twice at once.
/// - **GOAWAY**: a draining connection finishes its streams and takes no new one; news about a
///   connection of an older generation (one replaced since) changes nothing.
/// - **the window**: what the pool keeps in flight (`InFlightWindow`), between its floor and its
///   ceiling and not above what the connections' streams allow; the feeders (`observers`) each
///   get an even share when it changes.
/// - **shutdown**: every parked request is answered `shutdown` at once and every later one
///   refused; idle connections close at once, busy ones when their last stream ends; nothing
///   opens.
struct HTTP2PoolStateMachine<Connection, Waiter> {
    enum SlotState: Int, CaseIterable, Sendable {
        /// Not connected: before the first attempt or waiting out a backoff delay.
        case down
        /// TCP/TLS under way, or connected but the server's first SETTINGS not seen yet.
        case connecting
        /// Takes new streams.
        case ready
        /// GOAWAY received (or found unusable, or retired): finishes its streams, takes no new ones.
        case draining
    }

    struct Slot {
        var state: SlotState = .down
        /// Bumped on each new connection, so news about an old one is ignored.
        var generation = 0
        var connection: Connection?
        /// The server's SETTINGS_MAX_CONCURRENT_STREAMS; nil until the first SETTINGS.
        var serverLimit: Int?
        var settingsSeen = false
        var inFlight = 0
        /// An answer has arrived on this connection (token auth: the JWT was accepted).
        var answered = false
        /// A connection loop should keep this slot connected: the base slots from first use
        /// until the pool is dormant; the others from when the window needs them until idle.
        var active = false
        /// Its connection loop runs (started by an `open` action, ended by `loopEnded`).
        var looping = false
        /// Carried a stream since the last idle check.
        var carried = false
        /// Idle checks in a row that found it carrying nothing.
        var quietChecks = 0
    }

    /// Permission to open one stream on one connection; give it back with `release`.
    struct Lease {
        var slot: Int
        var generation: Int
        var connection: Connection
    }

    /// Why a request gets no stream.
    enum Refusal: Hashable, Sendable {
        case timedOut
        case shutdown
    }

    /// What to do with requests.
    enum RequestAction {
        case none
        /// The event's own request has a stream: write on it.
        case lease(Lease)
        /// The event's own request must wait: `park` it with its deadline.
        case park
        /// The event's own request gets no stream.
        case refuse(Refusal)
        /// Parked requests get streams, in the order they parked.
        case resume([(Waiter, Lease)])
        /// Parked requests get none.
        case fail([Waiter], Refusal)
    }

    /// What to do with connections.
    enum ConnectionAction {
        case none
        /// Start the connection loops of these slots.
        case open([Int])
        /// Close these connections (each loop then connects again or ends, as `isActive` says).
        case close([Connection])
        /// The slot's loop connects again: after the backoff's floor when the connection served
        /// (`afterUse`), else after a growing delay.
        case reconnect(afterUse: Bool)
    }

    /// The one deadline timer: when it fires, tell the machine `deadlinesPassed(now:)`.
    enum TimerAction: Hashable, Sendable {
        case none
        case schedule(at: UInt64)
        /// Shutdown: nothing parks any more.
        case cancel
    }

    /// What the operator is told (one line each).
    enum News: Hashable, Sendable {
        case none
        /// Another connection opens for the window.
        case opened(slot: Int, window: Int)
        /// The pool was idle and its next job opens these connections again.
        case reopened(connections: Int)
        /// Idle: every connection closes until the next job.
        case dormant(connections: Int)
        /// Connections opened for the window carried nothing for a whole idle period.
        case retired(connections: Int)
    }

    /// A new window: its target, the completion rate measured, and each observer's share.
    struct WindowChange: Hashable, Sendable {
        var target: Int
        var rate: Double
        var share: Int
    }

    /// The side effects of one event; the fields are independent and carried out together.
    struct Action {
        var request: RequestAction = .none
        var connection: ConnectionAction = .none
        var timer: TimerAction = .none
        var window: WindowChange?
        var news: News = .none

        static var none: Action { Action() }
    }

    private(set) var slots: [Slot]
    private var parked = ParkedQueue()
    private(set) var window: InFlightWindow
    /// The feeders sharing the window.
    private(set) var observers = 0
    /// The first send came (or the pool connects at start-up).
    private(set) var firstUsed: Bool
    /// `start()` came: open actions may be carried out.
    private(set) var started = false
    private(set) var shuttingDown = false
    /// Every connection closed for idleness: the pool is `idle` until its next send.
    private(set) var dormant = false
    /// Idle checks in a row that found the whole pool quiet.
    private(set) var poolQuietChecks = 0
    /// When the deadline timer asked for fires; nil when none is pending.
    private(set) var timerAt: UInt64?

    let streamCap: Int
    let oneStreamUntilFirstAnswer: Bool
    /// Slots kept connected whenever the pool is in use; those above are opened and closed as
    /// the in-flight window needs them.
    let baseConnections: Int
    /// Idle checks in a row that find the whole pool carrying nothing after which its base
    /// connections close too; nil: they stay open.
    let poolIdleChecks: Int?

    /// - Parameters:
    ///   - connections: the slots kept connected (the operator's `connections`, or its default).
    ///   - maxConnections: the most slots the window may open (at least `connections`).
    ///   - streamCap: our ceiling on streams per connection, below the server's.
    ///   - oneStreamUntilFirstAnswer: token authentication (see the type's comment).
    ///   - poolIdleChecks: see the property.
    ///   - connectOnFirstUse: no connection before the first send.
    ///   - window: the in-flight window, as configured.
    init(
        connections: Int, maxConnections: Int? = nil, streamCap: Int, oneStreamUntilFirstAnswer: Bool,
        poolIdleChecks: Int? = nil, connectOnFirstUse: Bool = false,
        window: InFlightWindow = InFlightWindow(floor: 1, ceiling: 1, now: 0)
    ) {
        let base = max(1, connections)
        self.baseConnections = base
        self.poolIdleChecks = poolIdleChecks.map { max(1, $0) }
        self.slots = Array(repeating: Slot(), count: max(base, maxConnections ?? base))
        self.streamCap = max(1, streamCap)
        self.oneStreamUntilFirstAnswer = oneStreamUntilFirstAnswer
        self.firstUsed = !connectOnFirstUse
        self.window = window
        if firstUsed { for index in 0..<base { slots[index].active = true } }
    }

    // MARK: queries

    var waiting: Int { parked.count }
    var inFlight: Int { slots.reduce(0) { $0 + $1.inFlight } }
    /// The earliest deadline of a parked request.
    var earliestDeadline: UInt64? { parked.earliestDeadline }

    func count(_ state: SlotState) -> Int { slots.filter { $0.state == state }.count }

    /// The streams the pool could carry at once: what its ready connections allow, and our cap
    /// for each slot not connected yet or not opened (the window's bound; it may grow towards
    /// connections the pool can still open, which the window's wish then opens).
    var streamCapacity: Int {
        slots.reduce(0) { total, slot in total + (slot.state == .ready ? limit(slot) : streamCap) }
    }

    /// Whether a slot's connection loop should go on (not shutting down, not retired).
    func isActive(slot: Int) -> Bool { !shuttingDown && slots[slot].active }

    /// Streams the slot may carry at once right now.
    func limit(_ slot: Slot) -> Int {
        if oneStreamUntilFirstAnswer && !slot.answered { return 1 }
        // RFC 9113: no MAX_CONCURRENT_STREAMS means no limit, so ours applies.
        return min(slot.serverLimit ?? streamCap, streamCap)
    }

    /// Whether the server's SETTINGS arrived on this connection. The handshake deadline asks
    /// this rather than whether the connection is ready now, so one draining soon after its
    /// SETTINGS (a GOAWAY, retirement) while still answering is not closed as "no SETTINGS".
    func settingsArrived(slot: Int, generation: Int) -> Bool {
        slots[slot].generation == generation && slots[slot].settingsSeen
    }

    /// The slots by what an operator is told.
    func connectionStates() -> [TransportConnectionState: Int] {
        var counts = Dictionary(uniqueKeysWithValues: TransportConnectionState.allCases.map { ($0, 0) })
        if !firstUsed {
            counts[shuttingDown ? .closed : .idle] = slots.count
            return counts
        }
        for slot in slots {
            let reported: TransportConnectionState
            switch slot.state {
            // A slot the window has not opened (or closed idle) is not down: nothing needs it.
            case .down where !slot.active && !shuttingDown, .draining where !slot.active && !shuttingDown:
                reported = .idle
            case .down: reported = shuttingDown ? .closed : .backingOff
            case .connecting: reported = .connecting
            case .ready: reported = .ready
            // After a GOAWAY a connection only finishes its streams and is then replaced: it
            // carries no new notifications, like one waiting to reconnect.
            case .draining: reported = .backingOff
            }
            counts[reported, default: 0] += 1
        }
        return counts
    }

    // MARK: the transport's life

    /// The transport runs: the base slots' loops start now unless the pool waits for its first use.
    mutating func start() -> Action {
        started = true
        return openBaseSlots()
    }

    /// Stop: every parked request is told, idle connections close, busy ones when drained.
    mutating func shutdown() -> Action {
        guard !shuttingDown else { return .none }
        shuttingDown = true
        var action = Action(timer: .cancel)
        var failed: [Waiter] = []
        while let entry = parked.popFirst() { failed.append(entry.waiter) }
        if !failed.isEmpty { action.request = .fail(failed, .shutdown) }
        var close: [Connection] = []
        for index in slots.indices {
            if slots[index].state == .ready { slots[index].state = .draining }
            if slots[index].inFlight == 0, let connection = slots[index].connection { close.append(connection) }
        }
        if !close.isEmpty { action.connection = .close(close) }
        timerAt = nil
        return action
    }

    /// A window observer joined (a bundle's consumer feeding this pool).
    mutating func observerAdded() { observers += 1 }

    /// Observers that no longer listen.
    mutating func observersGone(_ count: Int) { observers = max(0, observers - count) }

    // MARK: requests

    /// A send begins (before its first request for a stream): the window counts it; the first
    /// send opens a pool waiting for first use, and a send opens a dormant pool again.
    mutating func sendBegan(now: UInt64) -> Action {
        window.sent()
        guard !firstUsed || dormant else { return .none }
        firstUsed = true
        if dormant {
            dormant = false
            poolQuietChecks = 0
            var action = openBaseSlots()
            if case .open(let slots) = action.connection { action.news = .reopened(connections: slots.count) }
            return action
        }
        return openBaseSlots()
    }

    /// A request wants a stream now: `lease` when one is free and nobody is parked ahead, else
    /// `park` (the caller then parks it), or `refuse` after shutdown.
    mutating func requestStream() -> Action {
        if shuttingDown { return Action(request: .refuse(.shutdown)) }
        if parked.isEmpty, let lease = leaseSlot() { return Action(request: .lease(lease)) }
        return Action(request: .park)
    }

    /// Parks a request until a stream is free or `deadline` passes. A stream freed since
    /// `requestStream` said `park` is leased at once.
    mutating func park(_ waiter: Waiter, deadline: UInt64) -> Action {
        if shuttingDown { return Action(request: .refuse(.shutdown)) }
        if parked.isEmpty, let lease = leaseSlot() { return Action(request: .lease(lease)) }
        parked.append(waiter, deadline: deadline)
        guard timerAt.map({ deadline < $0 }) ?? true else { return .none }
        timerAt = deadline
        return Action(timer: .schedule(at: deadline))
    }

    /// The deadline timer fired: every parked request whose deadline is `now` or earlier is
    /// answered `timedOut`; the timer is asked again for the next deadline.
    mutating func deadlinesPassed(now: UInt64) -> Action {
        if let at = timerAt, at <= now { timerAt = nil }
        var action = Action.none
        let expired = parked.removeExpired(now: now)
        if !expired.isEmpty { action.request = .fail(expired, .timedOut) }
        if let next = parked.earliestDeadline, timerAt.map({ next < $0 }) ?? true {
            timerAt = next
            action.timer = .schedule(at: next)
        }
        return action
    }

    /// A stream ended (`answered`: APNs answered on it): it goes to the first parked request, and
    /// a connection drained during shutdown closes.
    mutating func release(_ lease: Lease, answered: Bool) -> Action {
        guard slots[lease.slot].generation == lease.generation else { return .none }
        slots[lease.slot].inFlight -= 1
        if answered { slots[lease.slot].answered = true }
        var action = Action(request: resumeParked())
        if shuttingDown, slots[lease.slot].inFlight == 0, let connection = slots[lease.slot].connection {
            action.connection = .close([connection])
        }
        return action
    }

    /// A send ended: the window measures it (`rtt` from the write on a stream to the answer),
    /// and a connection opens when the window wants more streams than the active ones carry.
    mutating func sendEnded(rtt: UInt64, answered: Bool, now: UInt64) -> Action {
        var action = Action.none
        let changed = window.ended(rtt: rtt, answered: answered, now: now, streamCapacity: streamCapacity)
        if let changed {
            let share = (changed + observers - 1) / max(1, observers)
            action.window = WindowChange(target: changed, rate: window.rate ?? 0, share: max(1, share))
        }
        if changed != nil || !parked.isEmpty { openForWindow(&action) }
        return action
    }

    // MARK: connections

    /// A new connection attempt on `slot` by its loop; returns its generation, which every later
    /// event about that connection carries.
    mutating func connecting(slot: Int) -> Int {
        slots[slot].generation += 1
        slots[slot].state = .connecting
        slots[slot].connection = nil
        slots[slot].serverLimit = nil
        slots[slot].settingsSeen = false
        slots[slot].inFlight = 0
        slots[slot].answered = false
        return slots[slot].generation
    }

    /// TCP and TLS set up (the channel exists). Ready once SETTINGS has also arrived.
    mutating func connected(slot: Int, generation: Int, connection: Connection) -> Action {
        guard slots[slot].generation == generation, slots[slot].state == .connecting else {
            return Action(connection: .close([connection]))
        }
        slots[slot].connection = connection
        if shuttingDown { return Action(connection: .close([connection])) }
        return Action(request: becomeReadyIfComplete(slot))
    }

    /// The server's SETTINGS (`maxConcurrentStreams`: nil when it sets none).
    mutating func settings(slot: Int, generation: Int, maxConcurrentStreams: Int?) -> Action {
        guard slots[slot].generation == generation else { return .none }
        if let maxConcurrentStreams { slots[slot].serverLimit = max(0, maxConcurrentStreams) }
        slots[slot].settingsSeen = true
        var action = Action(request: slots[slot].state == .connecting ? becomeReadyIfComplete(slot) : resumeParked())
        // Ready: if requests still wait, the next connection may open.
        if !parked.isEmpty { openForWindow(&action) }
        return action
    }

    /// GOAWAY, retirement before the stream ids run out, or a write found the connection
    /// closed: no new streams on it.
    mutating func draining(slot: Int, generation: Int) -> Action {
        guard slots[slot].generation == generation, slots[slot].state != .down else { return .none }
        slots[slot].state = .draining
        return .none
    }

    /// The connection is gone; its loop connects again (`reconnect`, sooner when it had served).
    mutating func closed(slot: Int, generation: Int) -> Action {
        guard slots[slot].generation == generation else { return Action(connection: .reconnect(afterUse: false)) }
        let wasUsed = slots[slot].state == .ready || slots[slot].state == .draining
        slots[slot].state = .down
        slots[slot].connection = nil
        slots[slot].inFlight = 0
        return Action(connection: .reconnect(afterUse: wasUsed))
    }

    /// The slot's connection loop returned. A slot made active again meanwhile (a reopen while
    /// its loop was ending) gets a new loop at once.
    mutating func loopEnded(slot: Int) -> Action {
        slots[slot].looping = false
        guard started, slots[slot].active, !shuttingDown else { return .none }
        slots[slot].looping = true
        return Action(connection: .open([slot]))
    }

    /// Once per idle period: an opened slot that carried nothing at two checks in a row (so for
    /// at least a whole period) is retired, not reconnected, and its connection closed. The base
    /// slots stay, unless the whole pool carried nothing (no stream, none parked) for
    /// `poolIdleChecks` checks in a row: then it is `dormant` until its next send.
    mutating func idleCheck() -> Action {
        guard firstUsed, !shuttingDown, !dormant else { return .none }
        var close: [Connection] = []
        let quiet = parked.isEmpty && slots.allSatisfy { !$0.carried && $0.inFlight == 0 }
        poolQuietChecks = quiet ? poolQuietChecks + 1 : 0
        if let poolIdleChecks, quiet, poolQuietChecks >= poolIdleChecks {
            dormant = true
            poolQuietChecks = 0
            for index in slots.indices where slots[index].active {
                if let connection = retire(index) { close.append(connection) }
            }
            return Action(connection: close.isEmpty ? .none : .close(close), news: .dormant(connections: close.count))
        }
        // Base slots carry on; their "carried" marks are read above and cleared here.
        for index in slots.indices where index < baseConnections { slots[index].carried = false }
        for index in slots.indices where index >= baseConnections && slots[index].active {
            if slots[index].carried || slots[index].inFlight > 0 {
                slots[index].carried = false
                slots[index].quietChecks = 0
                continue
            }
            slots[index].quietChecks += 1
            guard slots[index].quietChecks >= 2 else { continue }
            if let connection = retire(index) { close.append(connection) }
        }
        guard !close.isEmpty else { return .none }
        return Action(connection: .close(close), news: .retired(connections: close.count))
    }

    // MARK: the rules' helpers

    private mutating func retire(_ index: Int) -> Connection? {
        slots[index].active = false
        slots[index].quietChecks = 0
        slots[index].carried = false
        if slots[index].state == .ready || slots[index].state == .connecting { slots[index].state = .draining }
        return slots[index].connection
    }

    /// The base slots active, and those without a running loop opened (once started and first used).
    private mutating func openBaseSlots() -> Action {
        guard firstUsed, started, !shuttingDown else { return .none }
        var open: [Int] = []
        for index in 0..<baseConnections {
            slots[index].active = true
            if !slots[index].looping {
                slots[index].looping = true
                open.append(index)
            }
        }
        return open.isEmpty ? .none : Action(connection: .open(open))
    }

    /// Opens a slot when the window wants more streams than the active connections carry.
    private mutating func openForWindow(_ action: inout Action) {
        guard case .none = action.connection, let slot = slotToOpen(wanted: window.target) else { return }
        action.connection = .open([slot])
        action.news = .opened(slot: slot, window: window.target)
    }

    /// The slot to open for `wanted` streams at once, or nil. One at a time, and only once every
    /// active connection is ready with its real limit known (SETTINGS seen and, with token
    /// authentication, the first token accepted): until then a connection's limit says nothing
    /// of what it will carry. (Internal, not private: its tests ask it with any `wanted`.)
    mutating func slotToOpen(wanted: Int) -> Int? {
        guard started, firstUsed, !dormant, !shuttingDown else { return nil }
        var capacity = 0
        for slot in slots where slot.active {
            guard slot.state == .ready, !(oneStreamUntilFirstAnswer && !slot.answered) else { return nil }
            capacity += limit(slot)
        }
        guard wanted > capacity, let index = slots.firstIndex(where: { !$0.active && !$0.looping }) else { return nil }
        slots[index].active = true
        slots[index].looping = true
        slots[index].quietChecks = 0
        return index
    }

    private mutating func leaseSlot() -> Lease? {
        var best: Int?
        // The least busy ready connection with a free stream spreads load over all of them.
        for index in slots.indices where slots[index].state == .ready && slots[index].inFlight < limit(slots[index]) {
            if best.map({ slots[index].inFlight < slots[$0].inFlight }) ?? true { best = index }
        }
        guard let index = best, let connection = slots[index].connection else { return nil }
        slots[index].inFlight += 1
        slots[index].carried = true
        return Lease(slot: index, generation: slots[index].generation, connection: connection)
    }

    private mutating func resumeParked() -> RequestAction {
        guard !parked.isEmpty else { return .none }
        var resumed: [(Waiter, Lease)] = []
        while !parked.isEmpty, let lease = leaseSlot() {
            resumed.append((parked.popFirst()!.waiter, lease))
        }
        return resumed.isEmpty ? .none : .resume(resumed)
    }

    private mutating func becomeReadyIfComplete(_ slot: Int) -> RequestAction {
        guard slots[slot].settingsSeen, slots[slot].connection != nil, !shuttingDown else { return .none }
        slots[slot].state = .ready
        return resumeParked()
    }

    /// Parked requests in order, each with its deadline: a ring over an array (popping the first
    /// must not move the rest), without NIO's `CircularBuffer` so the machine stays pure.
    private struct ParkedQueue {
        private var entries: [(waiter: Waiter, deadline: UInt64)?] = []
        private var head = 0
        private(set) var count = 0

        var isEmpty: Bool { count == 0 }

        var earliestDeadline: UInt64? {
            var earliest: UInt64?
            for case let entry? in entries[head...] where earliest.map({ entry.deadline < $0 }) ?? true { earliest = entry.deadline }
            return earliest
        }

        mutating func append(_ waiter: Waiter, deadline: UInt64) {
            entries.append((waiter, deadline))
            count += 1
        }

        mutating func popFirst() -> (waiter: Waiter, deadline: UInt64)? {
            while head < entries.count {
                let entry = entries[head]
                entries[head] = nil
                head += 1
                if let entry {
                    count -= 1
                    compact()
                    return entry
                }
            }
            return nil
        }

        mutating func removeExpired(now: UInt64) -> [Waiter] {
            var expired: [Waiter] = []
            for index in head..<entries.count {
                if let entry = entries[index], entry.deadline <= now {
                    expired.append(entry.waiter)
                    entries[index] = nil
                    count -= 1
                }
            }
            compact()
            return expired
        }

        /// Drops the spent front once it is most of the array (amortised O(1) per request).
        private mutating func compact() {
            if count == 0 {
                entries.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 32 && head * 2 > entries.count {
                entries.removeFirst(head)
                head = 0
            }
        }
    }
}

extension HTTP2PoolStateMachine.Lease: Sendable where Connection: Sendable {}
extension HTTP2PoolStateMachine.RequestAction: Sendable where Connection: Sendable, Waiter: Sendable {}
extension HTTP2PoolStateMachine.ConnectionAction: Sendable where Connection: Sendable {}
extension HTTP2PoolStateMachine.Action: Sendable where Connection: Sendable, Waiter: Sendable {}
