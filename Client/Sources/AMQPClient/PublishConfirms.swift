/// Publisher confirms on the confirm-mode channel, as a value with no IO: the sequence number of
/// each publish, which publishes a broker's `basic.ack`/`basic.nack` settles (`multiple`
/// included), and which mandatory publish a `basic.return` belongs to. `ConnectionDriver` sends
/// the frames and resumes the waiters it is handed; the decisions are here, tested without a
/// broker. `Waiter` is whatever the driver resumes (a continuation).
struct PublishConfirms<Waiter> {
    /// What a `basic.return` carries to recognise its publish: it has no sequence number.
    struct ReturnKey: Equatable {
        var exchange: String
        var routingKey: String
        var body: [UInt8]
    }

    private struct Entry {
        var waiter: Waiter
        /// Kept for mandatory messages only.
        var returnKey: ReturnKey?
        var returned: AMQPError?
    }

    private var inFlight: [UInt64: Entry] = [:]
    private(set) var nextSequence: UInt64 = 1
    private var lowestUnconfirmed: UInt64 = 1

    /// Publishes waiting for the broker's confirm.
    var count: Int { inFlight.count }

    /// A new confirm channel numbers its publishes from 1 again (fail those in flight first).
    mutating func restartNumbering() {
        nextSequence = 1
        lowestUnconfirmed = 1
    }

    /// A publish went out on the channel; returns its sequence number.
    @discardableResult
    mutating func sent(_ waiter: Waiter, returnKey: ReturnKey?) -> UInt64 {
        let sequence = nextSequence
        nextSequence += 1
        inFlight[sequence] = Entry(waiter: waiter, returnKey: returnKey)
        return sequence
    }

    /// `basic.ack` (`ack`) or `basic.nack` up to `tag`: hands each publish it settles to
    /// `settle`, oldest first, with nil for success or why it failed (nacked, or returned
    /// before its ack).
    mutating func confirmed(upTo tag: UInt64, multiple: Bool, ack: Bool, settle: (Waiter, AMQPError?) -> Void) {
        let range: ClosedRange<UInt64> = multiple ? min(lowestUnconfirmed, tag)...tag : tag...tag
        for sequence in range {
            guard let entry = inFlight.removeValue(forKey: sequence) else { continue }
            if !ack {
                settle(entry.waiter, AMQPError(.publishNacked, "the broker nacked the publish (it could not take responsibility for it)"))
            } else {
                settle(entry.waiter, entry.returned)
            }
        }
        while lowestUnconfirmed < nextSequence && inFlight[lowestUnconfirmed] == nil { lowestUnconfirmed += 1 }
    }

    /// A `basic.return` precedes the ack of its message: it marks the oldest unconfirmed
    /// mandatory publish with the same exchange, key and body, which then fails with `error`
    /// when its ack comes. False when no publish in flight matches.
    mutating func returned(_ key: ReturnKey, error: AMQPError) -> Bool {
        var sequence = lowestUnconfirmed
        while sequence < nextSequence {
            if let entry = inFlight[sequence], entry.returned == nil, entry.returnKey == key {
                inFlight[sequence]?.returned = error
                return true
            }
            sequence += 1
        }
        return false
    }

    /// The channel or connection is gone: every publish in flight, oldest first, fails.
    mutating func failAll(_ fail: (Waiter) -> Void) {
        let pending = inFlight
        inFlight.removeAll()
        for sequence in pending.keys.sorted() { fail(pending[sequence]!.waiter) }
        lowestUnconfirmed = nextSequence
    }
}
