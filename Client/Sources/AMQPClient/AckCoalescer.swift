// Which acks the owner thread sends for one consumer channel, and when: completed deliveries
// are acknowledged with `multiple = true` up to the lowest one still unfinished, so one frame
// (and one write) settles many jobs. Pure: no librabbitmq, time passed in.

/// Coalesces the acks of one channel into `basic.ack(multiple: true)` frames.
///
/// Jobs finish out of order, and `multiple = true` acknowledges *every* outstanding tag up to
/// the one it names, so a multiple ack may only name a tag when every lower tag of the channel
/// is settled. The coalescer keeps the acks it was asked for (`ack`) and, at each `flush`,
/// sends one multiple ack for the longest settled prefix. Acks stuck behind an unfinished job
/// (a slow APNs answer) are not held for long: they count against the consumer's prefetch, so
/// once `maxHeld` of them wait, or the oldest has waited longer than jobs usually take
/// (`holdLimit`), they go out one by one.
///
/// "Longer than jobs usually take" is measured, not fixed: at Apple's distance every job takes
/// the round trip, and jobs spread over two connections finish a few tens of milliseconds
/// apart, one connection behind the other. A fixed 20 ms hold sent nearly every ack of the
/// faster connection on its own at a 50 ms round trip (50,281 single acks and 4,849 multiple
/// ones for 50,000 jobs in the kit), and the broker's CPU a job doubled.
///
/// Delivery tags of a channel start at 1 and grow by one per delivery (AMQP 0-9-1 §1.8.3.13);
/// a channel opened again starts a new coalescer.
struct AckCoalescer: Sendable {
    /// What to send, in this order.
    enum Frame: Sendable, Hashable {
        /// `basic.ack(tag, multiple: true)`: every outstanding tag up to `tag`.
        case ackThrough(UInt64)
        /// `basic.ack(tag, multiple: false)`.
        case ackOne(UInt64)
    }

    /// Longest an ack waits behind an unfinished lower tag, in nanoseconds, while jobs take less
    /// than half of it (`holdLimit`).
    let maxDelay: UInt64
    /// Most acks that wait behind an unfinished lower tag.
    private(set) var maxHeld: Int
    /// Fewer acks than this wait, up to `batchDelay`, for more to join them. Every ack frame
    /// costs the broker a command (on a quorum queue, a Raft log entry): in the side-by-side
    /// kit, waiting for a batch cut the broker's CPU per job by a third. The wait counts
    /// against the prefetch, so the batch is a small part of it (`batch(forPrefetch:)`).
    private(set) var batch: Int
    let batchDelay: UInt64

    /// When each outstanding delivery arrived, by tag modulo the ring's size, in units of 1,024
    /// ns (wrapping every 73 minutes: only differences are read). Sized to twice the prefetch,
    /// so every outstanding tag has its slot; empty until the first delivery.
    private var deliveredAt: [UInt32] = []
    private var ringCapacity: Int
    /// How long a job takes from its delivery to its ack, smoothed (nanoseconds); 0 until a job
    /// with a known delivery time is acked.
    private(set) var typicalJobTime: UInt64 = 0
    /// The longest hold however slow the jobs are: beyond it, acks held behind one job cost more
    /// of the prefetch than single acks cost the broker.
    static let longestHold: UInt64 = 1_000_000_000

    /// Every tag up to here is settled on the wire (acked, nacked or rejected).
    private(set) var settledThrough: UInt64 = 0
    /// The highest tag delivered to the channel's consumer (`delivered`).
    private(set) var deliveredThrough: UInt64 = 0
    /// Acks asked for and not yet sent, by tag, with when they were asked for.
    private var waiting: [UInt64: UInt64] = [:]
    /// Tags above `settledThrough` already settled on the wire (a nack, a reject, an ack sent
    /// on its own): the prefix may pass over them, but a multiple ack must not name them.
    private var settledAbove: Set<UInt64> = []
    /// When the oldest waiting ack was asked for.
    private var oldestWaitingSince: UInt64?
    /// The waiting acks in the order they were asked for (times never decrease), from
    /// `askHead`; entries whose tag went out are skipped when reached. The oldest waiting ack
    /// is found at the front instead of by a scan of every waiting one at each flush (up to
    /// half the window while one connection is behind the other).
    private var askOrder: [UInt64] = []
    private var askHead = 0
    /// When the latest ack was asked for.
    private var lastAckAskedAt: UInt64?

    static let defaultMaxHeld = 64

    init(maxDelay: UInt64 = 20_000_000, maxHeld: Int = defaultMaxHeld, batch: Int = 1, batchDelay: UInt64 = 1_000_000) {
        self.maxDelay = maxDelay
        self.maxHeld = max(1, maxHeld)
        self.batch = max(1, batch)
        self.batchDelay = min(batchDelay, maxDelay)
        self.ringCapacity = Self.ringCapacity(forHeld: self.maxHeld)
    }

    /// The coalescer of a consumer channel with this prefetch; nil for a `basic.get` channel,
    /// which has no consumer and no prefetch: no batch, and the default hold.
    init(consumerPrefetch prefetch: UInt16?) {
        guard let prefetch else {
            self.init()
            return
        }
        self.init(maxHeld: Self.maxHeld(forPrefetch: prefetch), batch: Self.batch(forPrefetch: prefetch))
    }

    /// The channel's consumer was replaced by one with this prefetch (the in-flight window
    /// moved): the batch and the hold follow it. The channel, its tags and what waits stay.
    mutating func resize(forPrefetch prefetch: UInt16) {
        maxHeld = Self.maxHeld(forPrefetch: prefetch)
        batch = Self.batch(forPrefetch: prefetch)
        let capacity = Self.ringCapacity(forHeld: maxHeld)
        guard capacity > ringCapacity else { return }
        if !deliveredAt.isEmpty {
            var grown = [UInt32](repeating: 0, count: capacity)
            let oldMask = UInt64(ringCapacity - 1)
            let newMask = UInt64(capacity - 1)
            let from = deliveredThrough > UInt64(ringCapacity) ? deliveredThrough - UInt64(ringCapacity) + 1 : 1
            if deliveredThrough >= from {
                for tag in from...deliveredThrough { grown[Int(tag & newMask)] = deliveredAt[Int(tag & oldMask)] }
            }
            deliveredAt = grown
        }
        ringCapacity = capacity
    }

    /// A power of two, at least four times the hold (twice the prefetch), so that every
    /// delivery the broker may have outstanding keeps its arrival time.
    private static func ringCapacity(forHeld held: Int) -> Int {
        var capacity = 64
        while capacity < 4 * held { capacity <<= 1 }
        return capacity
    }

    /// How long an ack may wait behind an unfinished tag: `maxDelay`, or twice what a job
    /// usually takes when that is longer (a long round trip to Apple), at most `longestHold`.
    var holdLimit: UInt64 {
        min(max(maxDelay, 2 &* typicalJobTime), max(maxDelay, Self.longestHold))
    }

    /// The batch for a consumer with this prefetch: an eighth of it, at most 64.
    static func batch(forPrefetch prefetch: UInt16) -> Int {
        max(1, min(64, Int(prefetch) / 8))
    }

    /// The most acks held behind an unfinished tag for a consumer with this prefetch: half of
    /// it, at least `defaultMaxHeld`. Jobs sent over several APNs connections finish
    /// interleaved, one connection a little behind the other, and held acks pile up until the
    /// slower one catches up; sending them one by one sooner made the broker handle one ack
    /// frame per four jobs instead of one per seventy.
    static func maxHeld(forPrefetch prefetch: UInt16) -> Int {
        max(defaultMaxHeld, Int(prefetch) / 2)
    }

    /// Acks asked for and not sent yet.
    var waitingCount: Int { waiting.count }

    /// No ack waiting and no delivery outstanding: nothing for the owner thread to send or to
    /// wait for (`ServeSchedule.sleep` would take nothing from it), so it can be passed over.
    var hasNothingPending: Bool { oldestWaitingSince == nil && unsettledCount == 0 }

    /// The channel's consumer was handed delivery `tag` at `now`.
    mutating func delivered(_ tag: UInt64, now: UInt64) {
        deliveredThrough = max(deliveredThrough, tag)
        if deliveredAt.isEmpty { deliveredAt = [UInt32](repeating: 0, count: ringCapacity) }
        deliveredAt[Int(tag & UInt64(ringCapacity - 1))] = Self.ringTime(now)
    }

    private static func ringTime(_ nanoseconds: UInt64) -> UInt32 { UInt32(truncatingIfNeeded: nanoseconds >> 10) }

    /// How long ago `tag` was delivered, if its slot still holds its time.
    private func age(of tag: UInt64, now: UInt64) -> UInt64? {
        guard !deliveredAt.isEmpty, tag <= deliveredThrough, deliveredThrough - tag < UInt64(ringCapacity) else { return nil }
        let then = deliveredAt[Int(tag & UInt64(ringCapacity - 1))]
        return UInt64(Self.ringTime(now) &- then) << 10
    }

    /// Deliveries handed to the consumer whose settlement has not reached the coalescer yet.
    var unsettledCount: Int {
        guard deliveredThrough > settledThrough else { return 0 }
        return max(0, Int(deliveredThrough - settledThrough) - settledAbove.count - waiting.count)
    }

    /// Whether more acks are expected soon: deliveries are unsettled and acks have been coming
    /// in lately (within `quietAfter`). A consumer whose jobs are all stuck waiting (a slow
    /// peer, a paused dependency) is not expected to ack soon.
    func expectsAcks(now: UInt64, quietAfter: UInt64 = 100_000_000) -> Bool {
        guard unsettledCount > 0, let last = lastAckAskedAt else { return false }
        return now &- last < quietAfter
    }

    /// The application acknowledged `tag` at `now` (nanoseconds of any monotonic clock).
    mutating func ack(_ tag: UInt64, now: UInt64) {
        guard tag > settledThrough, !settledAbove.contains(tag), waiting[tag] == nil else { return }
        lastAckAskedAt = max(lastAckAskedAt ?? now, now)
        if let jobTime = age(of: tag, now: now) {
            // An eighth of each new sample: steady under the spread of one connection's batch.
            typicalJobTime = typicalJobTime == 0 ? jobTime : typicalJobTime - typicalJobTime / 8 + jobTime / 8
        }
        waiting[tag] = now
        askOrder.append(tag)
        if oldestWaitingSince == nil { oldestWaitingSince = now }
    }

    /// `tag` was settled on the wire by other means (nack, reject): sent at once by the
    /// caller, it no longer blocks the prefix.
    mutating func settledElsewhere(_ tag: UInt64) {
        guard tag > settledThrough else { return }
        waiting[tag] = nil
        settledAbove.insert(tag)
        advance(passingWaiting: false)
    }

    /// The frames to send now. `force` sends every waiting ack (before a graceful close).
    mutating func flush(now: UInt64, force: Bool = false) -> [Frame] {
        guard !waiting.isEmpty else { return [] }
        if !force, waiting.count < batch, let oldest = oldestWaitingSince, now &- oldest < batchDelay { return [] }
        var frames: [Frame] = []
        if let named = advance(passingWaiting: true) { frames.append(.ackThrough(named)) }
        guard !waiting.isEmpty else {
            oldestWaitingSince = nil
            forgetAskOrder()
            return frames
        }
        let oldest = oldestWaitingSince ?? now
        if force || waiting.count >= maxHeld || now &- oldest >= holdLimit {
            for tag in waiting.keys.sorted() {
                frames.append(.ackOne(tag))
                settledAbove.insert(tag)
            }
            waiting.removeAll(keepingCapacity: true)
            oldestWaitingSince = nil
            forgetAskOrder()
            advance(passingWaiting: false)
        } else {
            oldestWaitingSince = oldestStillWaiting()
        }
        return frames
    }

    /// When the first ack of `askOrder` still waiting was asked for; drops the ones before it.
    private mutating func oldestStillWaiting() -> UInt64? {
        while askHead < askOrder.count {
            if let since = waiting[askOrder[askHead]] {
                if askHead >= 1024, askHead * 2 >= askOrder.count {
                    askOrder.removeFirst(askHead)
                    askHead = 0
                }
                return since
            }
            askHead += 1
        }
        forgetAskOrder()
        return nil
    }

    private mutating func forgetAskOrder() {
        askOrder.removeAll(keepingCapacity: true)
        askHead = 0
    }

    /// When the next `flush` may have something to send on its own (the oldest waiting ack
    /// reaches `batchDelay` while the batch is short, `holdLimit` after); nil when nothing waits.
    func nextDeadline() -> UInt64? {
        oldestWaitingSince.map { $0 &+ (waiting.count < batch ? batchDelay : holdLimit) }
    }

    /// Moves `settledThrough` over every settled or waiting tag right above it, and returns the
    /// highest waiting tag it passed: the tag a multiple ack must name (a tag settled elsewhere
    /// is not outstanding any more, so it is never named). `passingWaiting: false` passes
    /// settled tags only.
    @discardableResult
    private mutating func advance(passingWaiting includeWaiting: Bool) -> UInt64? {
        var named: UInt64?
        while true {
            let next = settledThrough + 1
            if settledAbove.remove(next) != nil {
                settledThrough = next
            } else if includeWaiting, waiting.removeValue(forKey: next) != nil {
                settledThrough = next
                named = next
            } else {
                return named
            }
        }
    }
}
