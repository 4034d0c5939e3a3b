// Waking the connection's owner thread from other threads, in one place: the eventfd it sleeps
// on beside the socket (`OwnerWake`), and the decision of when a caller must signal it
// (`WakeDecision`, a value with no IO, kept in `SharedState` under the connection's lock so
// that it changes together with the command queue).
import CRabbitMQShim
import Foundation

/// When a caller that queued a command must signal the owner thread, and when it need not.
///
/// The thread sleeps in poll(2) on the socket and the eventfd (`OwnerWake`). A command queued
/// while it sleeps must wake it, except acks while it is in a brief sleep awaiting acks: the
/// eventfd write and the wake-up it causes cost the caller (the worker's event loop) more than
/// the ack, so acks wake it only once a batch of them is queued; the brief sleep ends by
/// itself within the batch delay (`AckCoalescer`).
struct WakeDecision: Sendable, Hashable {
    /// The owner thread is (about to be) in poll(2): a new command must signal the eventfd.
    private(set) var sleeping = false
    /// While the owner thread sleeps no longer than its acks may wait: acks signal the eventfd
    /// only once this many are queued.
    private(set) var ackBatch: Int?
    private(set) var acksWhileSleeping = 0

    /// The owner thread goes to sleep (with `ackBatch` when it awaits acks: its sleep is brief).
    mutating func goingToSleep(ackBatch: Int?) {
        sleeping = true
        self.ackBatch = ackBatch
        acksWhileSleeping = 0
    }

    /// The owner thread woke up (for any reason).
    mutating func wokeUp() {
        sleeping = false
        ackBatch = nil
    }

    /// A command other than an ack was queued: whether to signal the eventfd.
    mutating func commandQueued() -> Bool {
        guard sleeping else { return false }
        sleeping = false
        return true
    }

    /// An ack was queued: whether to signal the eventfd.
    mutating func ackQueued() -> Bool {
        guard sleeping else { return false }
        if let batch = ackBatch {
            acksWhileSleeping += 1
            if acksWhileSleeping < batch { return false }
        }
        sleeping = false
        return true
    }
}

/// The eventfd that wakes the owner thread out of poll(2) (librabbitmq has no wake-up of its
/// own; the shim wraps eventfd(2)). Closed with the connection.
final class OwnerWake: Sendable {
    let fd: Int32

    init() throws {
        let fd = crabbitmq_wakeup_create()
        guard fd >= 0 else { throw AMQPError(.library, "eventfd() failed: errno \(errno)") }
        self.fd = fd
    }

    deinit { crabbitmq_wakeup_close(fd) }

    func signal() { crabbitmq_wakeup_signal(fd) }

    /// Sleeps until `socket` (-1: none) is readable, the eventfd is signalled or `milliseconds`
    /// pass; consumes the signal.
    func wait(socket: Int32, milliseconds: Int32) {
        let result = crabbitmq_wait_readable(socket, fd, milliseconds)
        if result > 0 && result & 2 != 0 { crabbitmq_wakeup_drain(fd) }
    }
}
