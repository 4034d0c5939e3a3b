import AMQPClient
import CancellableWait
import Synchronization

/// One broker session kept open for an admin server's side-effect-free reads (queue depths,
/// the hand-back checks after a listing), instead of a new one for each. Opened on first use;
/// a real one (`AMQPConnection`) reconnects by itself once up. A first open that fails is
/// tried again by the next caller.
///
/// The open is a single flight with no task of its own: the first caller opens in its own
/// task, and those that come meanwhile wait for its session (`SharedOpen`). A waiter cancelled
/// leaves at once; an opener cancelled hands the open to the first waiter, so nobody's
/// cancellation fails another's read.
final class PooledSession: Sendable {
    let sessions: any BrokerSessionOpening
    private typealias Turn = SharedOpenTurn<any BrokerSession>
    private let state = Mutex(SharedOpen<any BrokerSession, CheckedContinuation<Turn, any Error>>())

    init(sessions: any BrokerSessionOpening) {
        self.sessions = sessions
    }

    func get() async throws -> any BrokerSession {
        switch try await turn() {
        case .use(let session): return session
        case .open: return try await open()
        case .closed: throw PooledSessionClosed()
        case .failed(let error): throw error
        }
    }

    /// The session now, or the open to make, or (after a wait for the open under way) its
    /// session, its failure, or the open handed over by a cancelled opener.
    private func turn() async throws -> Turn {
        let id = state.withLock { $0.newWaiterID() }
        return try await withCancellableWait(
            register: { continuation -> Result<Turn, any Error>? in
                state.withLock { $0.get(waiter: continuation, id: id) }.map { .success($0) }
            },
            withdraw: { [self] in state.withLock { $0.withdraw(id) } })
    }

    private func open() async throws -> any BrokerSession {
        let made: any BrokerSession
        do {
            made = try await sessions.open("reads")
        } catch {
            let handed = state.withLock { $0.failed(error, openerCancelled: Task.isCancelled) }
            for (waiter, turn) in handed { waiter.resume(returning: turn) }
            throw error
        }
        let (waiters, keep) = state.withLock { $0.opened(made) }
        for (waiter, turn) in waiters { waiter.resume(returning: turn) }
        guard keep else {
            // Closed while it was opening: the admin server stops, and nobody keeps it.
            await made.close()
            throw PooledSessionClosed()
        }
        return made
    }

    /// Closes the session if one was opened; a later `get()` opens a new one. An open under way
    /// is closed when it arrives, and those waiting for it are told the session closed.
    func close() async {
        if let session = state.withLock({ $0.close() }) { await session.close() }
    }
}

/// A read that came while the pooled session closed (the admin server stops).
struct PooledSessionClosed: Error, CustomStringConvertible {
    var description: String { "the admin server's read session closed" }
}

/// What a caller of a `SharedOpen` does next.
enum SharedOpenTurn<Value: Sendable>: Sendable {
    /// Use the open value.
    case use(Value)
    /// Open it: the caller is the one opener.
    case open
    /// The open under way failed with this error (the next caller tries again).
    case failed(any Error)
    /// Closed while the open was under way.
    case closed
}

/// A value opened once and shared, as a value (pure): closed, opening with callers waiting
/// for it, or open. `Waiter` is resumed by the caller with the `Turn` each event hands it.
struct SharedOpen<Value: Sendable, Waiter> {
    typealias Turn = SharedOpenTurn<Value>

    private enum Phase {
        case closed
        /// The opener's open is under way; `closeOnArrival`: `close()` came meanwhile.
        case opening(waiters: [(id: UInt64, waiter: Waiter)], closeOnArrival: Bool)
        case open(Value)
    }

    private var phase = Phase.closed
    private var nextID: UInt64 = 0

    mutating func newWaiterID() -> UInt64 {
        nextID += 1
        return nextID
    }

    /// A caller's turn now, or nil when it must wait (`waiter` is kept, as `id`).
    mutating func get(waiter: Waiter, id: UInt64) -> Turn? {
        switch phase {
        case .open(let value): return .use(value)
        case .closed:
            phase = .opening(waiters: [], closeOnArrival: false)
            return .open
        case .opening(var waiters, let closeOnArrival):
            waiters.append((id, waiter))
            phase = .opening(waiters: waiters, closeOnArrival: closeOnArrival)
            return nil
        }
    }

    /// A waiter that left (cancelled), if it still waited.
    mutating func withdraw(_ id: UInt64) -> Waiter? {
        guard case .opening(var waiters, let closeOnArrival) = phase, let index = waiters.firstIndex(where: { $0.id == id }) else {
            return nil
        }
        let waiter = waiters.remove(at: index).waiter
        phase = .opening(waiters: waiters, closeOnArrival: closeOnArrival)
        return waiter
    }

    /// The opener's value arrived: the waiters' turns, and whether it is kept (false when
    /// `close()` came meanwhile: the opener closes it).
    mutating func opened(_ value: Value) -> (waiters: [(Waiter, Turn)], keep: Bool) {
        guard case .opening(let waiters, let closeOnArrival) = phase else { return ([], false) }
        phase = closeOnArrival ? .closed : .open(value)
        return (waiters.map { ($0.waiter, closeOnArrival ? .closed : .use(value)) }, !closeOnArrival)
    }

    /// The opener's open failed. When the opener itself was cancelled, the first waiter opens
    /// instead (the others wait on); otherwise every waiter shares the failure, and the next
    /// caller opens again.
    mutating func failed(_ error: any Error, openerCancelled: Bool) -> [(Waiter, Turn)] {
        guard case .opening(var waiters, let closeOnArrival) = phase else { return [] }
        if closeOnArrival {
            phase = .closed
            return waiters.map { ($0.waiter, .closed) }
        }
        if openerCancelled, !waiters.isEmpty {
            let next = waiters.removeFirst().waiter
            phase = .opening(waiters: waiters, closeOnArrival: false)
            return [(next, .open)]
        }
        phase = .closed
        return waiters.map { ($0.waiter, .failed(error)) }
    }

    /// Closes: the open value to close, if there is one; an open under way is closed when it
    /// arrives.
    mutating func close() -> Value? {
        switch phase {
        case .closed: return nil
        case .open(let value):
            phase = .closed
            return value
        case .opening(let waiters, _):
            phase = .opening(waiters: waiters, closeOnArrival: true)
            return nil
        }
    }
}
