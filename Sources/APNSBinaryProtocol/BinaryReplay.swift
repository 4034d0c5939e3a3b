import APNSModel

/// The binary provider API's in-flight buffer and replay, as a pure state machine (no IO, time
/// passed in). Apple never confirms a frame: it only answers the first bad one with an error
/// response naming it, closes the connection and discards every frame that followed. So every
/// written frame stays in a bounded buffer until either
/// - an error response names it or a later frame (then it is settled at once), or
/// - the hold window has passed since the socket took it (`written(through:)`) with the
///   connection still up and no error (then it counts as delivered: `.binaryAccepted`). A frame
///   still in our own buffers never counts: on a stalled connection it would be acked unsent.
/// Frames that followed a named one, and frames still held when a connection closes without an
/// error response, are written again (with new identifiers) on the next connection.
///
/// The IO layer feeds events (`submit`, `connected`, `written`, `errorResponse`,
/// `connectionClosed`, `connectFailed`, `holdWindowElapsed`, `beginShutdown`) and carries out
/// the returned actions in order. One machine drives one connection at a time.
public struct BinaryReplayStateMachine<Request: Sendable>: Sendable {
    /// Frames to write on the current connection, a job to settle, a timer, a close.
    public enum Action: Sendable {
        /// Encode and write this frame (numbered `identifier`) on the current connection.
        /// `replay` is true when it was written before on a connection that failed.
        case write(identifier: UInt32, request: Request, replay: Bool)
        /// The final result for a request: the caller's `send` returns it.
        case complete(Request, TransportResult)
        /// Call `holdWindowElapsed` at (or after) this instant.
        case scheduleHoldTimer(at: ContinuousClock.Instant)
        /// Close the current connection (after an error response, or when shutdown has drained).
        case closeConnection
        /// An error response named an identifier that is not in the buffer (already counted as
        /// delivered because the hold window is too short, or never ours). Everything held was
        /// requeued, since Apple discarded it; worth a warning.
        case unmatchedErrorResponse(BinaryErrorResponse)
    }

    public enum ConnectionState: Sendable, Hashable {
        /// No usable connection: requests queue until `connected`.
        case disconnected
        /// Frames are written as they come, up to the buffer capacity.
        case connected
        /// An error response arrived (or we asked to close): nothing more is written on this
        /// connection, which Apple is closing.
        case draining
    }

    private struct Held: Sendable {
        var identifier: UInt32
        var request: Request
        /// When the socket took the frame; nil while it sits in our buffers.
        var writtenAt: ContinuousClock.Instant?
        /// When the request first arrived: replays keep it, so `maxQueueWait` bounds the whole wait.
        var queuedAt: ContinuousClock.Instant
    }

    private struct Queued: Sendable {
        var request: Request
        var queuedAt: ContinuousClock.Instant
        var replay: Bool
    }

    public let capacity: Int
    public let holdWindow: Duration
    /// How long a request may wait for a connection before a failed connect attempt gives up on it.
    public let maxQueueWait: Duration

    public private(set) var connection: ConnectionState = .disconnected
    public private(set) var shuttingDown = false
    private var nextIdentifier: UInt32
    /// Written on the current connection, oldest first. Identifiers are assigned in write order.
    private var held: [Held] = []
    private var heldStart = 0
    /// Index in `held` of the first frame the socket has not taken yet. Writes complete in
    /// order, so the written frames are a prefix of the held ones.
    private var firstUnwritten = 0
    /// Waiting to be written: replays first, then new requests in arrival order.
    private var queue: [Queued] = []
    private var queueStart = 0
    private var timerArmed = false

    /// - Parameters:
    ///   - capacity: frames held at once on the connection; further requests wait (backpressure).
    ///   - holdWindow: how long after writing a frame Apple's silence counts as delivery.
    ///   - firstIdentifier: where numbering starts (tests start near `UInt32.max`); 0 is never
    ///     used because Apple answers a frame it could not number with identifier 0.
    public init(capacity: Int, holdWindow: Duration, maxQueueWait: Duration = .seconds(10), firstIdentifier: UInt32 = 1) {
        precondition(capacity > 0, "the in-flight buffer needs room for at least one frame")
        self.capacity = capacity
        self.holdWindow = holdWindow
        self.maxQueueWait = maxQueueWait
        self.nextIdentifier = firstIdentifier == 0 ? 1 : firstIdentifier
    }

    /// Frames written on the current connection and not settled yet.
    public var heldCount: Int { held.count - heldStart }
    /// Requests waiting for a connection or for room in the buffer.
    public var queuedCount: Int { queue.count - queueStart }
    /// The identifiers held, oldest first (for tests and the admin page).
    public var heldIdentifiers: [UInt32] { held[heldStart...].map(\.identifier) }

    // MARK: events

    /// The socket took every frame up to and including `identifier` (the write completed): their
    /// hold windows start now. An identifier not waiting for its write (a closed connection's)
    /// changes nothing.
    public mutating func written(through identifier: UInt32, now: ContinuousClock.Instant) -> [Action] {
        guard connection != .disconnected else { return [] }
        var index = max(firstUnwritten, heldStart)
        while index < held.count, held[index].identifier != identifier { index += 1 }
        guard index < held.count else { return [] }
        for i in max(firstUnwritten, heldStart)...index { held[i].writtenAt = now }
        firstUnwritten = index + 1
        var actions: [Action] = []
        armTimer(into: &actions)
        return actions
    }

    /// A new request. Written at once when connected and the buffer has room; otherwise it waits
    /// (no action for it yet) until a connection or room is there.
    public mutating func submit(_ request: Request, now: ContinuousClock.Instant) -> [Action] {
        if shuttingDown { return [.complete(request, .failed(.shutdown))] }
        queue.append(Queued(request: request, queuedAt: now, replay: false))
        return writeQueued(now: now)
    }

    /// A connection is up (TLS handshake done): the queue, replays first, is written.
    public mutating func connected(now: ContinuousClock.Instant) -> [Action] {
        precondition(heldCount == 0, "frames held from a previous connection must be settled before a new one")
        if shuttingDown {
            connection = .draining
            return [.closeConnection]
        }
        connection = .connected
        return writeQueued(now: now)
    }

    /// A connect attempt failed: requests that have waited longer than `maxQueueWait` give up
    /// with `.failed(.connectFailed)` (their jobs are retried); the rest keep waiting.
    public mutating func connectFailed(reason: String, now: ContinuousClock.Instant) -> [Action] {
        connection = .disconnected
        var actions: [Action] = []
        var kept: [Queued] = []
        for entry in queue[queueStart...] {
            if shuttingDown {
                actions.append(.complete(entry.request, .failed(.shutdown)))
            } else if now - entry.queuedAt >= maxQueueWait {
                actions.append(.complete(entry.request, .failed(.connectFailed(reason))))
            } else {
                kept.append(entry)
            }
        }
        queue = kept
        queueStart = 0
        return actions
    }

    /// Apple's error response: frames before the named one were processed (delivered), the named
    /// one gets its status (shutdown, 10, names the last frame processed: it is delivered too), and
    /// everything after it was discarded and is written again on the next connection.
    public mutating func errorResponse(_ response: BinaryErrorResponse, now: ContinuousClock.Instant) -> [Action] {
        guard connection == .connected else { return [] }  // Apple sends one; anything later is noise
        connection = .draining
        var actions: [Action] = []
        if let index = held[heldStart...].firstIndex(where: { $0.identifier == response.identifier }) {
            for entry in held[heldStart..<index] { actions.append(.complete(entry.request, .binaryAccepted)) }
            let named = held[index]
            if response.status == .shutdown {
                actions.append(.complete(named.request, .binaryAccepted))
            } else {
                actions.append(.complete(named.request, .binaryRejected(status: response.status.rawValue)))
            }
            requeueForReplay(held[(index + 1)...])
        } else {
            actions.append(.unmatchedErrorResponse(response))
            requeueForReplay(held[heldStart...])
        }
        clearHeld()
        actions.append(.closeConnection)
        return actions
    }

    /// The connection is gone. Frames still held (inside their hold window) may never have
    /// reached Apple: they are written again on the next connection. During shutdown there is no
    /// next connection, so they fail with `.connectionLost` (their jobs are retried).
    public mutating func connectionClosed(reason: String, now: ContinuousClock.Instant) -> [Action] {
        connection = .disconnected
        var actions: [Action] = []
        if shuttingDown {
            for entry in held[heldStart...] { actions.append(.complete(entry.request, .failed(.connectionLost(reason)))) }
            for entry in queue[queueStart...] { actions.append(.complete(entry.request, .failed(.shutdown))) }
            queue.removeAll()
            queueStart = 0
        } else {
            requeueForReplay(held[heldStart...])
        }
        clearHeld()
        return actions
    }

    /// The hold timer fired: frames written at least `holdWindow` ago on a connection that is
    /// still up, with no error response, are delivered; the room they free is used at once.
    public mutating func holdWindowElapsed(now: ContinuousClock.Instant) -> [Action] {
        timerArmed = false
        var actions: [Action] = []
        if connection == .connected {
            while heldStart < held.count, let writtenAt = held[heldStart].writtenAt, now - writtenAt >= holdWindow {
                actions.append(.complete(held[heldStart].request, .binaryAccepted))
                heldStart += 1
            }
            compactHeld()
            actions += writeQueued(now: now)
            if shuttingDown && heldCount == 0 {
                connection = .draining
                actions.append(.closeConnection)
            }
        }
        armTimer(into: &actions)
        return actions
    }

    /// Graceful shutdown: requests never written fail with `.failed(.shutdown)`; frames held are
    /// settled as usual (hold window or error response), then the connection is closed.
    public mutating func beginShutdown() -> [Action] {
        guard !shuttingDown else { return [] }
        shuttingDown = true
        var actions: [Action] = queue[queueStart...].map { .complete($0.request, .failed(.shutdown)) }
        queue.removeAll()
        queueStart = 0
        if connection == .connected && heldCount == 0 {
            connection = .draining
            actions.append(.closeConnection)
        }
        return actions
    }

    // MARK: internals

    private mutating func writeQueued(now: ContinuousClock.Instant) -> [Action] {
        guard connection == .connected else { return [] }
        var actions: [Action] = []
        while queueStart < queue.count, heldCount < capacity {
            let entry = queue[queueStart]
            queueStart += 1
            let identifier = takeIdentifier()
            held.append(Held(identifier: identifier, request: entry.request, writtenAt: nil, queuedAt: entry.queuedAt))
            actions.append(.write(identifier: identifier, request: entry.request, replay: entry.replay))
        }
        if queueStart == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueStart = 0
        } else if queueStart > 1024 && queueStart * 2 > queue.count {
            queue.removeFirst(queueStart)
            queueStart = 0
        }
        armTimer(into: &actions)
        return actions
    }

    private mutating func armTimer(into actions: inout [Action]) {
        guard !timerArmed, connection == .connected, heldStart < held.count, let writtenAt = held[heldStart].writtenAt else { return }
        timerArmed = true
        actions.append(.scheduleHoldTimer(at: writtenAt + holdWindow))
    }

    /// Puts frames to write again ahead of everything waiting, in their original order.
    private mutating func requeueForReplay(_ entries: ArraySlice<Held>) {
        guard !entries.isEmpty else { return }
        let replays = entries.map { Queued(request: $0.request, queuedAt: $0.queuedAt, replay: true) }
        queue.replaceSubrange(queue.startIndex..<queueStart, with: [])
        queue.insert(contentsOf: replays, at: 0)
        queueStart = 0
    }

    private mutating func takeIdentifier() -> UInt32 {
        let identifier = nextIdentifier
        nextIdentifier &+= 1
        if nextIdentifier == 0 { nextIdentifier = 1 }
        return identifier
    }

    private mutating func compactHeld() {
        if heldStart == held.count {
            clearHeld()
        } else if heldStart > 1024 && heldStart * 2 > held.count {
            held.removeFirst(heldStart)
            firstUnwritten = max(firstUnwritten - heldStart, 0)
            heldStart = 0
        }
    }

    private mutating func clearHeld() {
        held.removeAll(keepingCapacity: true)
        heldStart = 0
        firstUnwritten = 0
    }
}

extension BinaryReplayStateMachine.Action: Equatable where Request: Equatable {}
