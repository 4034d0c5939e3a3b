@testable import APNSTransport

/// The world around an `HTTP2PoolStateMachine`, as `HTTP2Transport` and APNs would make it, in
/// plain values: it carries out each action the machine returns (connection loops, connections
/// closed, streams written and answered, parked requests answered, the deadline timer) and
/// records as a violation every action a real transport could not carry out, and every broken
/// rule of the machine's doc comment: a stream past a connection's limit or on one not ready, a
/// request answered twice or out of order, a parked request past its deadline with no timer
/// due, a loop started twice or past the pool's size, a connection opened before first use or
/// after shutdown, a count that disagrees with the world's.
struct PoolWorld {
    typealias Pool = HTTP2PoolStateMachine<String, Int>

    /// The pool's configurations, small enough for a few requests to reach every limit.
    enum Setup: String, CaseIterable, Sendable {
        /// Certificates: one base connection, up to three, two streams each.
        case certificate
        /// Tokens: one stream per connection until its first answer.
        case token
        /// Connects on first use, two base connections, dormant after two idle checks.
        case firstUse

        func pool() -> Pool {
            let window = InFlightWindow(floor: 2, ceiling: 8, now: 0)
            switch self {
            case .certificate:
                return Pool(connections: 1, maxConnections: 3, streamCap: 2, oneStreamUntilFirstAnswer: false, window: window)
            case .token:
                return Pool(connections: 1, maxConnections: 2, streamCap: 2, oneStreamUntilFirstAnswer: true, window: window)
            case .firstUse:
                return Pool(
                    connections: 2, maxConnections: 3, streamCap: 2, oneStreamUntilFirstAnswer: false, poolIdleChecks: 2,
                    connectOnFirstUse: true, window: window)
            }
        }
    }

    /// What can happen to a pool from outside, one step each. A step that cannot happen in the
    /// world's state (an answer with no stream out) does nothing and says so.
    enum Stimulus: String, CaseIterable, Sendable {
        /// A notification to send, with a deadline `timeout` from now.
        case send
        /// APNs answers the oldest stream; a stream fails unanswered (a deadline, a reset).
        case answer, failStream
        /// The first slot whose loop runs without a connection connects (TLS done).
        case connect
        /// SETTINGS on the first connection without them: a limit of 1, or none (our cap).
        case settingsOne, settingsNone
        /// GOAWAY on the first ready connection.
        case goaway
        /// The first connection drops: its streams end unanswered, then it is closed.
        case drop
        /// Loops of retired slots, or of a pool shut down, return.
        case loopsReturn
        /// Half a request timeout passes; the timers due fire.
        case timePasses
        case idleCheck
        case shutdown
    }

    static let timeout: UInt64 = 1_000_000_000
    /// Steps of a nanosecond so that answers in one instant still count as a rate.
    static let answerTime: UInt64 = 30_000_000

    struct Connection {
        var name: String
        var generation: Int
        var settings = false
    }

    var pool: Pool
    let setup: Setup
    var now: UInt64 = 0
    /// Slots whose connection loop runs.
    var loops: Set<Int> = []
    var connections: [Int: Connection] = [:]
    /// Streams out, oldest first, each with its request.
    var streams: [(request: Int, lease: Pool.Lease)] = []
    /// Parked requests in the order they parked, with their deadlines.
    var parked: [(request: Int, deadline: UInt64)] = []
    var timers: [UInt64] = []
    var nextRequest = 0
    var nextConnection = 0
    /// Requests answered with a stream, a timeout or shutdown, each once.
    var ended: Set<Int> = []
    /// Requests given a stream.
    var streamed: Set<Int> = []
    var shutDown = false
    var windowChanges = 0
    var violations: [String] = []

    init(_ setup: Setup) {
        self.setup = setup
        self.pool = setup.pool()
        carryOut(pool.start(), for: nil)
        check("start")
    }

    mutating func violation(_ message: String) { violations.append(message) }

    // MARK: stimuli

    /// Applies `stimulus`; false when it could not happen (nothing changed).
    @discardableResult
    mutating func apply(_ stimulus: Stimulus) -> Bool {
        let happened = step(stimulus)
        check("\(stimulus)")
        return happened
    }

    private mutating func step(_ stimulus: Stimulus) -> Bool {
        switch stimulus {
        case .send:
            let request = nextRequest
            nextRequest += 1
            carryOut(pool.sendBegan(now: now), for: nil)
            let asked = pool.requestStream()
            if case .park = asked.request {
                carryOut(pool.park(request, deadline: now + Self.timeout), for: request)
            } else {
                carryOut(asked, for: request)
            }
            return true
        case .answer, .failStream:
            guard !streams.isEmpty else { return false }
            let stream = streams.removeFirst()
            now += Self.answerTime
            fireTimers()
            endStream(stream.lease, answered: stimulus == .answer)
            return true
        case .connect:
            guard let slot = loops.sorted().first(where: { connections[$0] == nil && pool.isActive(slot: $0) }) else { return false }
            let generation = pool.connecting(slot: slot)
            let name = "s\(slot).\(nextConnection)"
            nextConnection += 1
            connections[slot] = Connection(name: name, generation: generation)
            carryOut(pool.connected(slot: slot, generation: generation, connection: name), for: nil)
            return true
        case .settingsOne, .settingsNone:
            guard let slot = connections.keys.sorted().first(where: { !connections[$0]!.settings }) else { return false }
            connections[slot]!.settings = true
            let limit: Int? = stimulus == .settingsOne ? 1 : nil
            carryOut(pool.settings(slot: slot, generation: connections[slot]!.generation, maxConcurrentStreams: limit), for: nil)
            return true
        case .goaway:
            guard let slot = connections.keys.sorted().first(where: { pool.slots[$0].state == .ready }) else { return false }
            carryOut(pool.draining(slot: slot, generation: connections[slot]!.generation), for: nil)
            return true
        case .drop:
            guard let slot = connections.keys.sorted().first else { return false }
            drop(slot)
            return true
        case .loopsReturn:
            let returning = loops.sorted().filter { connections[$0] == nil && !pool.isActive(slot: $0) }
            guard !returning.isEmpty else { return false }
            for slot in returning {
                loops.remove(slot)
                carryOut(pool.loopEnded(slot: slot), for: nil)
            }
            return true
        case .timePasses:
            now += Self.timeout / 2
            fireTimers()
            return true
        case .idleCheck:
            carryOut(pool.idleCheck(), for: nil)
            return true
        case .shutdown:
            shutDown = true
            carryOut(pool.shutdown(), for: nil)
            return true
        }
    }

    /// A stream ends: the lease goes back, then the send ends (the window measures it).
    private mutating func endStream(_ lease: Pool.Lease, answered: Bool) {
        carryOut(pool.release(lease, answered: answered), for: nil)
        endSend(answered: answered)
    }

    private mutating func endSend(answered: Bool) {
        let action = pool.sendEnded(rtt: Self.answerTime, answered: answered, now: now)
        if action.window != nil { windowChanges += 1 }
        carryOut(action, for: nil)
    }

    /// A connection goes away: the first of its streams to end unanswered finds it inactive
    /// (`draining`), they all end (NIO fails them before the close completes), then the machine
    /// hears it closed.
    private mutating func drop(_ slot: Int) {
        guard let connection = connections[slot] else { return }
        carryOut(pool.draining(slot: slot, generation: connection.generation), for: nil)
        connections[slot] = nil
        let lost = streams.filter { $0.lease.connection == connection.name }
        streams.removeAll { $0.lease.connection == connection.name }
        for stream in lost { endStream(stream.lease, answered: false) }
        let closed = pool.closed(slot: slot, generation: connection.generation)
        guard case .reconnect = closed.connection else { return violation("a closed connection not followed by its loop's next step") }
    }

    private mutating func fireTimers() {
        while let due = timers.filter({ $0 <= now }).min() {
            timers.removeAll { $0 == due }
            carryOut(pool.deadlinesPassed(now: now), for: nil)
        }
    }

    // MARK: carrying out actions

    /// Carries out `action`; `request` is the event's own request, if it has one.
    mutating func carryOut(_ action: Pool.Action, for request: Int?) {
        switch action.request {
        case .none:
            break
        case .lease(let lease):
            guard let request else { return violation("a lease for no request") }
            handOut(lease, to: request)
        case .park:
            violation("park answered to \(request.map(String.init) ?? "nobody") by an event that cannot park")
        case .refuse(let refusal):
            guard let request else { return violation("a refusal for no request") }
            if refusal != .shutdown || !shutDown { violation("request \(request) refused \(refusal) while running") }
            answer(request)
            endSend(answered: false)
        case .resume(let granted):
            for (waiter, lease) in granted {
                guard let first = parked.first else { violation("resumed \(waiter), who was not parked"); continue }
                if first.request != waiter { violation("resumed \(waiter) ahead of \(first.request)") }
                parked.removeAll { $0.request == waiter }
                handOut(lease, to: waiter)
            }
        case .fail(let waiters, let refusal):
            for waiter in waiters {
                guard let entry = parked.first(where: { $0.request == waiter }) else { violation("failed \(waiter), who was not parked"); continue }
                if refusal == .timedOut && entry.deadline > now { violation("\(waiter) timed out before its deadline") }
                if refusal == .shutdown && !shutDown { violation("\(waiter) failed for a shutdown that did not happen") }
                parked.removeAll { $0.request == waiter }
                answer(waiter)
                endSend(answered: false)
            }
        }
        // The `park` event answers `none` for its own request: it is parked.
        if let request, case .none = action.request { parked.append((request, now + Self.timeout)) }
        switch action.connection {
        case .none, .reconnect:
            break
        case .open(let slots):
            for slot in slots {
                if loops.contains(slot) { violation("loop of slot \(slot) started twice") }
                if slot >= pool.slots.count { violation("slot \(slot) past the pool's size") }
                if !pool.firstUsed { violation("slot \(slot) opened before first use") }
                if shutDown { violation("slot \(slot) opened after shutdown") }
                loops.insert(slot)
            }
        case .close(let names):
            for name in names {
                guard let slot = connections.first(where: { $0.value.name == name })?.key else { continue }
                if streams.contains(where: { $0.lease.connection == name }) { violation("closed \(name) with streams on it") }
                drop(slot)
            }
        }
        switch action.timer {
        case .none: break
        case .schedule(let at): timers.append(at)
        case .cancel: timers.removeAll()
        }
        if let window = action.window, window.share < 1 { violation("a window share of \(window.share)") }
    }

    private mutating func handOut(_ lease: Pool.Lease, to request: Int) {
        answer(request)
        if shutDown { violation("a stream for \(request) after shutdown") }
        guard let connection = connections[lease.slot], connection.name == lease.connection, connection.generation == lease.generation else {
            return violation("a stream on \(lease.connection), which is not connected")
        }
        let slot = pool.slots[lease.slot]
        if slot.state != .ready { violation("a stream on \(lease.connection) in state \(slot.state)") }
        if slot.inFlight > pool.limit(slot) { violation("\(slot.inFlight) streams on \(lease.connection), its limit \(pool.limit(slot))") }
        streams.append((request, lease))
        streamed.insert(request)
    }

    private mutating func answer(_ request: Int) {
        if !ended.insert(request).inserted { violation("request \(request) answered twice") }
    }

    // MARK: invariants

    /// The rules that hold after every step.
    mutating func check(_ step: String) {
        for (index, slot) in pool.slots.enumerated() {
            let mine = streams.filter { $0.lease.slot == index && $0.lease.generation == slot.generation }.count
            if slot.inFlight != mine { violation("after \(step): slot \(index) counts \(slot.inFlight) streams, the world \(mine)") }
            if slot.state == .ready && connections[index] == nil { violation("after \(step): slot \(index) ready without a connection") }
        }
        if pool.waiting != parked.count { violation("after \(step): \(pool.waiting) parked, the world \(parked.count)") }
        if let earliest = parked.map(\.deadline).min() {
            if earliest <= now { violation("after \(step): a request parked past its deadline") }
            if !timers.contains(where: { $0 <= earliest }) { violation("after \(step): no timer due by the earliest deadline") }
        }
        if shutDown && !parked.isEmpty { violation("after \(step): requests parked after shutdown") }
        if shutDown {
            for (slot, connection) in connections where !streams.contains(where: { $0.lease.connection == connection.name }) {
                violation("after \(step): idle connection of slot \(slot) left open after shutdown")
            }
        }
        if !pool.firstUsed && !loops.isEmpty { violation("after \(step): loops before first use") }
        if loops.count > pool.slots.count { violation("after \(step): more loops than slots") }
        let window = pool.window
        if window.target < window.floor || window.target > window.ceiling { violation("after \(step): window \(window.target) out of bounds") }
        if pool.firstUsed && !pool.dormant && !pool.shuttingDown {
            for slot in 0..<pool.baseConnections where !pool.slots[slot].active { violation("after \(step): base slot \(slot) inactive") }
        }
        if pool.dormant && pool.slots.contains(where: \.active) { violation("after \(step): an active slot in a dormant pool") }
    }

    /// Lets everything under way finish: loops connect and get SETTINGS, streams are answered,
    /// time passes every deadline, retired loops return.
    mutating func quiesce() {
        for _ in 0..<50 {
            var moved = false
            while step(.connect) { moved = true }
            while step(.settingsNone) { moved = true }
            while step(.answer) { moved = true }
            if !parked.isEmpty {
                now += Self.timeout
                fireTimers()
                moved = true
            }
            // A server closes a connection after its GOAWAY once its streams are done.
            for slot in connections.keys.sorted() where pool.slots[slot].state == .draining && !streams.contains(where: { $0.lease.slot == slot }) {
                drop(slot)
                moved = true
            }
            if step(.loopsReturn) { moved = true }
            check("quiesce")
            if !moved { return }
        }
        violation("never came to rest")
    }
}
