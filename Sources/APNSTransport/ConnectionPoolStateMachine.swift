/// Which connection a request goes to, and who waits: the pool of an `HTTP2Transport` as a pure
/// state machine, generic over the connection and the waiter so that tests drive it with plain
/// values. The transport holds it under a lock and carries out what it returns.
import NIOCore

struct ConnectionPoolStateMachine<Connection, Waiter> {
    enum SlotState: Int, CaseIterable, Sendable {
        /// Not connected: before the first attempt or waiting out a backoff delay.
        case down
        /// TCP/TLS under way, or connected but the server's first SETTINGS not seen yet.
        case connecting
        /// Takes new streams.
        case ready
        /// GOAWAY received (or found unusable): finishes its streams, takes no new ones.
        case draining

        var name: String {
            switch self {
            case .down: return "down"
            case .connecting: return "connecting"
            case .ready: return "ready"
            case .draining: return "draining"
            }
        }
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
        /// A connection loop keeps this slot connected: always for the base slots; for the
        /// others from when the window needs them (`slotToOpen`) until idle (`idleCheck`).
        var active = false
        /// The slot's connection loop has not returned yet (a retired slot's loop is ending).
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

    enum AcquireAction {
        case leased(Lease)
        case wait
        case shutdown
    }

    /// Waiters to resume with their leases, and a connection to close (shutdown, drained).
    struct Dispatch {
        var resume: [(Waiter, Lease)] = []
        var close: [Connection] = []
    }

    private(set) var slots: [Slot]
    private var waiters = CircularBuffer<(id: UInt64, waiter: Waiter)>()
    private(set) var shuttingDown = false
    let streamCap: Int
    let oneStreamUntilFirstAnswer: Bool
    /// Slots kept connected whenever the pool is in use; those above are opened and closed as
    /// the in-flight window needs them (issue 38).
    let baseConnections: Int
    /// Idle checks in a row that find the whole pool carrying nothing after which its base
    /// connections close too (issue 39: a pool opens on its first job and closes after it has
    /// been idle a while); nil: they stay open.
    let poolIdleChecks: Int?
    /// Idle checks in a row that found the whole pool quiet.
    private(set) var poolQuietChecks = 0
    /// Every connection closed for idleness: the pool is `idle` until its next job (`reopen`).
    private(set) var dormant = false

    /// - Parameters:
    ///   - connections: the slots kept connected (the operator's `connections`, or its default).
    ///   - maxConnections: the most slots the window may open (at least `connections`).
    ///   - streamCap: our ceiling on streams per connection, below the server's.
    ///   - oneStreamUntilFirstAnswer: token authentication: Apple allows one stream on a new
    ///     connection until it has validated the first token.
    ///   - poolIdleChecks: see the property.
    init(connections: Int, maxConnections: Int? = nil, streamCap: Int, oneStreamUntilFirstAnswer: Bool, poolIdleChecks: Int? = nil) {
        let base = max(1, connections)
        self.baseConnections = base
        self.poolIdleChecks = poolIdleChecks.map { max(1, $0) }
        self.slots = Array(repeating: Slot(), count: max(base, maxConnections ?? base))
        for index in 0..<base { slots[index].active = true }
        self.streamCap = max(1, streamCap)
        self.oneStreamUntilFirstAnswer = oneStreamUntilFirstAnswer
    }

    var waiting: Int { waiters.count }
    var inFlight: Int { slots.reduce(0) { $0 + $1.inFlight } }

    func count(_ state: SlotState) -> Int { slots.filter { $0.state == state }.count }

    /// The streams the pool could carry at once: what its ready connections allow, and our cap
    /// for each slot not connected yet or not opened (the window's bound; it may grow towards
    /// connections the pool can still open, which the window's wish then opens).
    var streamCapacity: Int {
        slots.reduce(0) { total, slot in total + (slot.state == .ready ? limit(slot) : streamCap) }
    }

    /// Whether a slot's connection loop should go on (not shutting down, not retired).
    func isActive(slot: Int) -> Bool { !shuttingDown && slots[slot].active }

    // MARK: connections opened and closed as the window needs (issue 38)

    /// The window wants `wanted` streams at once: the slot to open when the active connections
    /// cannot carry them, or nil. One at a time, and only once every active connection is
    /// ready with its real limit known (SETTINGS seen and, with token authentication, the first
    /// token accepted): until then a connection's limit says nothing of what it will carry.
    mutating func slotToOpen(wanted: Int) -> Int? {
        guard !shuttingDown else { return nil }
        var capacity = 0
        for slot in slots where slot.active {
            guard slot.state == .ready, !(oneStreamUntilFirstAnswer && !slot.answered) else { return nil }
            capacity += limit(slot)
        }
        guard wanted > capacity, let index = slots.firstIndex(where: { !$0.active && !$0.looping }) else { return nil }
        slots[index].active = true
        slots[index].quietChecks = 0
        return index
    }

    /// The transport started (true) or ended (false) the connection loop of `slot`.
    mutating func looping(slot: Int, _ running: Bool) {
        slots[slot].looping = running
    }

    /// Run once per idle period: an opened slot that carried nothing at two checks in a row (so
    /// for at least a whole period) is retired, not reconnected, and its connection closed. The
    /// base slots stay.
    /// With `poolIdleChecks`, a pool that carried nothing (no stream, none waiting) at that many
    /// checks in a row closes its base connections too and is `dormant` until `reopen`.
    mutating func idleCheck() -> [Connection] {
        var close: [Connection] = []
        let quiet = !dormant && waiters.isEmpty && slots.allSatisfy { !$0.carried && $0.inFlight == 0 }
        poolQuietChecks = quiet ? poolQuietChecks + 1 : 0
        if let poolIdleChecks, quiet, poolQuietChecks >= poolIdleChecks {
            dormant = true
            poolQuietChecks = 0
            for index in slots.indices where slots[index].active {
                slots[index].active = false
                slots[index].quietChecks = 0
                if slots[index].state == .ready || slots[index].state == .connecting { slots[index].state = .draining }
                if let connection = slots[index].connection { close.append(connection) }
            }
            return close
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
            slots[index].active = false
            if slots[index].state == .ready || slots[index].state == .connecting { slots[index].state = .draining }
            if let connection = slots[index].connection { close.append(connection) }
        }
        return close
    }

    /// A job for a dormant pool: its base slots are active again; the slots whose connection
    /// loop must be started (those whose loop has ended). Empty when the pool is not dormant.
    mutating func reopen() -> [Int] {
        guard dormant, !shuttingDown else { return [] }
        dormant = false
        poolQuietChecks = 0
        var start: [Int] = []
        for index in 0..<baseConnections {
            slots[index].active = true
            if !slots[index].looping { start.append(index) }
        }
        return start
    }

    /// Streams the slot may carry at once right now.
    func limit(_ slot: Slot) -> Int {
        if oneStreamUntilFirstAnswer && !slot.answered { return 1 }
        // RFC 9113: no MAX_CONCURRENT_STREAMS means no limit, so ours applies.
        return min(slot.serverLimit ?? streamCap, streamCap)
    }

    // MARK: requests

    mutating func acquire(id: UInt64, waiter: Waiter) -> AcquireAction {
        if shuttingDown { return .shutdown }
        if waiters.isEmpty, let lease = leaseSlot() { return .leased(lease) }
        waiters.append((id, waiter))
        return .wait
    }

    /// A lease when one is free now and nobody waits ahead, else nil (the caller then waits
    /// through `acquire`). Shutting down also gives nil, and `acquire` then says so.
    mutating func leaseIfFree() -> Lease? {
        guard !shuttingDown, waiters.isEmpty else { return nil }
        return leaseSlot()
    }

    /// The waiter gave up (deadline, cancellation); nil when it was already resumed.
    mutating func removeWaiter(id: UInt64) -> Waiter? {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return nil }
        return waiters.remove(at: index).waiter
    }

    mutating func release(_ lease: Lease, answered: Bool) -> Dispatch {
        guard slots[lease.slot].generation == lease.generation else { return Dispatch() }
        slots[lease.slot].inFlight -= 1
        if answered { slots[lease.slot].answered = true }
        var dispatch = dispatchWaiters()
        if shuttingDown, slots[lease.slot].inFlight == 0, let connection = slots[lease.slot].connection {
            dispatch.close.append(connection)
        }
        return dispatch
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

    private mutating func dispatchWaiters() -> Dispatch {
        var dispatch = Dispatch()
        while !waiters.isEmpty, let lease = leaseSlot() {
            dispatch.resume.append((waiters.removeFirst().waiter, lease))
        }
        return dispatch
    }

    // MARK: connections

    /// A new connection attempt on `slot`; returns its generation.
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
    mutating func connected(slot: Int, generation: Int, connection: Connection) -> Dispatch {
        guard slots[slot].generation == generation, slots[slot].state == .connecting else {
            return Dispatch(close: [connection])
        }
        slots[slot].connection = connection
        if shuttingDown { return Dispatch(close: [connection]) }
        return becomeReadyIfComplete(slot)
    }

    mutating func settings(slot: Int, generation: Int, maxConcurrentStreams: Int?) -> Dispatch {
        guard slots[slot].generation == generation else { return Dispatch() }
        if let maxConcurrentStreams { slots[slot].serverLimit = maxConcurrentStreams }
        slots[slot].settingsSeen = true
        if slots[slot].state == .connecting { return becomeReadyIfComplete(slot) }
        return dispatchWaiters()
    }

    private mutating func becomeReadyIfComplete(_ slot: Int) -> Dispatch {
        guard slots[slot].settingsSeen, slots[slot].connection != nil, !shuttingDown else { return Dispatch() }
        slots[slot].state = .ready
        return dispatchWaiters()
    }

    /// Whether the server's SETTINGS arrived on this connection. The handshake deadline asks
    /// this rather than whether the connection is ready now, so one draining soon after its
    /// SETTINGS (a GOAWAY, retirement) while still answering is not closed as "no SETTINGS".
    func settingsArrived(slot: Int, generation: Int) -> Bool {
        slots[slot].generation == generation && slots[slot].settingsSeen
    }

    /// GOAWAY, or a write found the connection closed: no new streams on it.
    mutating func draining(slot: Int, generation: Int) {
        guard slots[slot].generation == generation, slots[slot].state != .down else { return }
        slots[slot].state = .draining
    }

    /// The connection is gone; returns whether it had been ready (for the reconnect delay).
    mutating func closed(slot: Int, generation: Int) -> Bool {
        guard slots[slot].generation == generation else { return false }
        let wasUsed = slots[slot].state == .ready || slots[slot].state == .draining
        slots[slot].state = .down
        slots[slot].connection = nil
        slots[slot].inFlight = 0
        return wasUsed
    }

    /// Stop: every waiter is told, idle connections close, busy ones close when drained.
    mutating func beginShutdown() -> (waiters: [Waiter], close: [Connection]) {
        shuttingDown = true
        var resumed: [Waiter] = []
        while let entry = waiters.popFirst() { resumed.append(entry.waiter) }
        var close: [Connection] = []
        for index in slots.indices {
            if slots[index].state == .ready { slots[index].state = .draining }
            if slots[index].inFlight == 0, let connection = slots[index].connection { close.append(connection) }
        }
        return (resumed, close)
    }
}

extension ConnectionPoolStateMachine.Lease: Sendable where Connection: Sendable {}
extension ConnectionPoolStateMachine.Dispatch: Sendable where Connection: Sendable, Waiter: Sendable {}
