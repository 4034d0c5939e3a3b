// The ack coalescer decides which acks go out as `multiple = true`; no broker needed.
import APNSModel
import SeededRandom
import Testing

@testable import AMQPClient

@Suite struct AckCoalescerTests {
    /// The owner thread passes over a coalescer with nothing pending when it plans its sleep; one
    /// with a delivery outstanding or an ack held must never be passed over.
    @Test func nothingPendingOnlyWhenNoDeliveryIsOutstandingAndNoAckHeld() {
        var acks = AckCoalescer()
        #expect(acks.hasNothingPending)
        acks.delivered(2, now: 0)
        #expect(!acks.hasNothingPending)
        acks.ack(2, now: 0)
        #expect(!acks.hasNothingPending)
        #expect(acks.flush(now: 0, force: true) == [.ackOne(2)])
        #expect(!acks.hasNothingPending, "tag 1 is still outstanding")
        acks.ack(1, now: 1)
        #expect(acks.flush(now: 1, force: true) == [.ackThrough(1)], "tag 2 was acked already")
        #expect(acks.hasNothingPending)
        #expect(ServeSchedule.sleep(pollInterval: .milliseconds(250), acks: [acks], now: 2)
            == ServeSchedule.sleep(pollInterval: .milliseconds(250), acks: [AckCoalescer](), now: 2))
    }

    @Test func inOrderAcksGoOutAsOneMultipleAck() {
        var acks = AckCoalescer()
        for tag in 1...50 as ClosedRange<UInt64> { acks.ack(tag, now: 0) }
        #expect(acks.flush(now: 0) == [.ackThrough(50)])
        #expect(acks.settledThrough == 50)
        #expect(acks.flush(now: 1) == [])
    }

    @Test func anUnfinishedTagStopsTheMultipleAckBelowIt() {
        var acks = AckCoalescer()
        for tag: UInt64 in [1, 2, 4, 5] { acks.ack(tag, now: 0) }
        #expect(acks.flush(now: 0) == [.ackThrough(2)])
        #expect(acks.waitingCount == 2)
        acks.ack(3, now: 1)
        #expect(acks.flush(now: 1) == [.ackThrough(5)])
        #expect(acks.waitingCount == 0)
    }

    @Test func acksStuckBehindASlowJobGoOutOneByOneAfterTheDelay() {
        var acks = AckCoalescer(maxDelay: 100, maxHeld: 1000)
        for tag: UInt64 in [2, 3, 4] { acks.ack(tag, now: 10) }
        #expect(acks.flush(now: 10) == [])
        #expect(acks.nextDeadline() == 110)
        #expect(acks.flush(now: 109) == [])
        #expect(acks.flush(now: 110) == [.ackOne(2), .ackOne(3), .ackOne(4)])
        #expect(acks.nextDeadline() == nil)
        // The slow job ends: its ack names it, passing over the tags acked one by one.
        acks.ack(1, now: 200)
        #expect(acks.flush(now: 200) == [.ackThrough(1)])
        #expect(acks.settledThrough == 4)
        acks.ack(5, now: 200)
        #expect(acks.flush(now: 200) == [.ackThrough(5)])
    }

    /// The hold is timed from the oldest ack still waiting, found in the order acks were asked
    /// for (not by a scan of all of them at each flush): once a multiple ack took the front ones,
    /// the next still waiting decides, also after the front's stale entries are dropped.
    @Test func theHoldIsTimedFromTheOldestAckStillWaitingAfterTheFrontWentOut() {
        var acks = AckCoalescer(maxDelay: 1_000_000, maxHeld: 100_000)
        // Tags 1 and 1501 unfinished; every other tag of 2...3000 acked at 10 × its tag.
        for tag: UInt64 in 2...3000 where tag != 1501 {
            acks.ack(tag, now: tag * 10)
            #expect(acks.flush(now: tag * 10) == [])
        }
        #expect(acks.nextDeadline() == 20 + 1_000_000)
        acks.ack(1, now: 40_000)
        #expect(acks.flush(now: 40_000) == [.ackThrough(1500)])
        #expect(acks.waitingCount == 1499)
        #expect(acks.nextDeadline() == 15_020 + 1_000_000, "tag 1502's time decides now")
        #expect(acks.flush(now: 40_001) == [])
        #expect(acks.nextDeadline() == 15_020 + 1_000_000)
        acks.ack(1501, now: 50_000)
        #expect(acks.flush(now: 50_000) == [.ackThrough(3000)])
        #expect(acks.nextDeadline() == nil)
        // Afterwards the order starts afresh: a new ack decides alone.
        acks.ack(3002, now: 60_000)
        #expect(acks.flush(now: 60_000) == [])
        #expect(acks.nextDeadline() == 60_000 + 1_000_000)
        #expect(acks.flush(now: 60_000 + 1_000_000) == [.ackOne(3002)])
    }

    @Test func aShortBatchWaitsForMoreUntilTheBatchDelay() {
        var acks = AckCoalescer(maxDelay: 1000, batch: 4, batchDelay: 100)
        for tag: UInt64 in 1...3 { acks.ack(tag, now: 10) }
        #expect(acks.flush(now: 10) == [])
        #expect(acks.nextDeadline() == 110)
        #expect(acks.flush(now: 109) == [])
        #expect(acks.flush(now: 110) == [.ackThrough(3)])
        // A full batch goes out at once.
        for tag: UInt64 in 4...7 { acks.ack(tag, now: 200) }
        #expect(acks.flush(now: 200) == [.ackThrough(7)])
        // A close sends a short batch too.
        acks.ack(8, now: 300)
        #expect(acks.flush(now: 300, force: true) == [.ackThrough(8)])
    }

    @Test func theBatchIsAnEighthOfThePrefetchAtMost64() {
        #expect(AckCoalescer.batch(forPrefetch: 500) == 62)
        #expect(AckCoalescer.batch(forPrefetch: 50) == 6)
        #expect(AckCoalescer.batch(forPrefetch: 1) == 1)
        #expect(AckCoalescer.batch(forPrefetch: 2000) == 64)
    }

    @Test func unsettledDeliveriesAreThoseNotYetAckedOrSettledElsewhere() {
        var acks = AckCoalescer(batch: 4, batchDelay: 100)
        #expect(acks.unsettledCount == 0)
        for tag: UInt64 in 1...6 { acks.delivered(tag, now: 0) }
        #expect(acks.unsettledCount == 6)
        acks.ack(2, now: 0)
        acks.settledElsewhere(5)
        #expect(acks.unsettledCount == 4)
        acks.ack(1, now: 0)
        #expect(acks.flush(now: 0) == [])  // a short batch waits
        #expect(acks.unsettledCount == 3)
        #expect(acks.flush(now: 100) == [.ackThrough(2)])
        #expect(acks.unsettledCount == 3)
        for tag: UInt64 in [3, 4, 6] { acks.ack(tag, now: 200) }
        #expect(acks.unsettledCount == 0)
        #expect(acks.flush(now: 300) == [.ackThrough(6)])
        #expect(acks.unsettledCount == 0)
    }

    /// Acks are expected soon only while deliveries are unsettled and acks keep coming: a
    /// consumer whose jobs all wait on something slow lets the owner thread sleep long.
    @Test func acksAreExpectedWhileTheyKeepComing() {
        var acks = AckCoalescer()
        for tag: UInt64 in 1...3 { acks.delivered(tag, now: 0) }
        #expect(!acks.expectsAcks(now: 0, quietAfter: 50))  // nothing acked yet
        acks.ack(1, now: 10)
        #expect(acks.expectsAcks(now: 59, quietAfter: 50))
        #expect(!acks.expectsAcks(now: 60, quietAfter: 50))  // quiet for too long
        acks.ack(2, now: 70)
        acks.ack(3, now: 70)
        #expect(!acks.expectsAcks(now: 71, quietAfter: 50))  // nothing left to settle
        acks.delivered(4, now: 0)
        #expect(acks.expectsAcks(now: 71, quietAfter: 50))
    }

    @Test func upToHalfThePrefetchWaitsBehindAnUnfinishedTag() {
        #expect(AckCoalescer.maxHeld(forPrefetch: 500) == 250)
        #expect(AckCoalescer.maxHeld(forPrefetch: 50) == AckCoalescer.defaultMaxHeld)
        let consumer = AckCoalescer(consumerPrefetch: 500)
        #expect(consumer.maxHeld == 250 && consumer.batch == 62)
        // A `basic.get` channel: no batch, the default hold.
        let get = AckCoalescer(consumerPrefetch: nil)
        #expect(get.maxHeld == AckCoalescer.defaultMaxHeld && get.batch == 1)
    }

    /// Jobs spread over two APNs connections finish interleaved, one connection 100 jobs (3 ms)
    /// behind the other. With half the prefetch allowed to wait, every ack still goes out in
    /// multiple acks; with 64, the waiting ones went out one frame each.
    @Test func interleavedConnectionsStillAckInBatches() {
        func frames(maxHeld: Int) -> [AckCoalescer.Frame] {
            var acks = AckCoalescer(maxHeld: maxHeld, batch: 62)
            var sent: [AckCoalescer.Frame] = []
            var now: UInt64 = 0
            let lag: UInt64 = 100
            for step in 1...1_100 as ClosedRange<UInt64> {
                now += 30_000  // 30 µs a job
                let ahead = 2 * step - 1  // the faster connection's odd tags
                if ahead <= 2_000 { acks.ack(ahead, now: now) }
                if step > lag, 2 * (step - lag) <= 2_000 { acks.ack(2 * (step - lag), now: now) }
                if step % 10 == 0 { sent += acks.flush(now: now) }
            }
            sent += acks.flush(now: now, force: true)
            #expect(acks.settledThrough == 2_000)
            return sent
        }
        let batched = frames(maxHeld: AckCoalescer.maxHeld(forPrefetch: 500))
        #expect(batched.allSatisfy { if case .ackThrough = $0 { true } else { false } })
        let oneByOne = frames(maxHeld: AckCoalescer.defaultMaxHeld)
        #expect(oneByOne.count > 5 * batched.count, "\(oneByOne.count) frames against \(batched.count)")
    }

    /// At a 50 ms round trip, jobs of one channel alternate between two connections and the
    /// slower connection answers 30 ms after the faster one: the faster one's acks wait longer
    /// than the fixed 20 ms hold. The hold follows how long jobs take (twice 50–80 ms), so they
    /// still go out in multiple acks; a coalescer that never learns the jobs' time (no delivery
    /// times) sends most of them one frame each.
    @Test func atApplesDistanceOneConnectionBehindTheOtherStillAcksInBatches() {
        func frames(knowsDeliveryTimes: Bool) -> (frames: [AckCoalescer.Frame], maxOutstanding: Int) {
            var acks = AckCoalescer(consumerPrefetch: 2_000)
            let ms: UInt64 = 1_000_000
            let gap: UInt64 = 50_000  // 20,000 jobs/s
            let jobs: UInt64 = 20_000
            // (time, tag) of every ack: odd tags 50 ms after their delivery, even ones 80 ms.
            let answers = (1...jobs).map { tag in (tag * gap + (tag % 2 == 1 ? 50 : 80) * ms, tag) }.sorted { $0.0 < $1.0 }
            var sent: [AckCoalescer.Frame] = []
            var delivered: UInt64 = 0
            var maxOutstanding = 0
            var nextFlush = ms
            for (at, tag) in answers {
                while delivered < jobs, (delivered + 1) * gap <= at {
                    delivered += 1
                    if knowsDeliveryTimes { acks.delivered(delivered, now: delivered * gap) }
                }
                while nextFlush <= at {
                    sent += acks.flush(now: nextFlush)
                    nextFlush += ms
                }
                acks.ack(tag, now: at)
                maxOutstanding = max(maxOutstanding, Int(delivered - acks.settledThrough))
            }
            sent += acks.flush(now: nextFlush, force: true)
            #expect(acks.settledThrough == jobs)
            return (sent, maxOutstanding)
        }
        let measured = frames(knowsDeliveryTimes: true)
        let single = measured.frames.filter { if case .ackOne = $0 { true } else { false } }.count
        #expect(single == 0, "\(single) single acks of \(measured.frames.count) frames")
        #expect(measured.frames.count < 20_000 / 10, "\(measured.frames.count) frames for 20,000 jobs")
        #expect(measured.maxOutstanding <= 2_000, "the held acks stay inside the prefetch")
        let fixed = frames(knowsDeliveryTimes: false).frames
        #expect(fixed.count > 5 * measured.frames.count, "\(fixed.count) frames with a fixed hold against \(measured.frames.count)")
    }

    /// Near the sink jobs take a millisecond: an ack behind a job stuck for longer goes out on
    /// its own after `maxDelay`, as before; and however slow jobs become, no ack waits more than
    /// `longestHold`.
    @Test func theHoldFollowsTheJobsTimeBetweenMaxDelayAndTheLongestHold() {
        let ms: UInt64 = 1_000_000
        let µs: UInt64 = 1_000
        var near = AckCoalescer(consumerPrefetch: 500)
        for tag: UInt64 in 1...100 {
            near.delivered(tag, now: tag * 10 * µs)
            if tag > 1 { near.ack(tag, now: tag * 10 * µs + ms) }
        }
        #expect(Self.close(near.typicalJobTime, ms))
        #expect(near.holdLimit == near.maxDelay)
        let firstAck = 20 * µs + ms
        #expect(near.flush(now: 2 * ms).isEmpty, "tag 1 is unfinished")
        #expect(near.flush(now: firstAck + near.maxDelay - 1).isEmpty)
        let released = near.flush(now: firstAck + near.maxDelay)
        #expect(released.count == 99 && released.allSatisfy { if case .ackOne = $0 { true } else { false } })

        var far = AckCoalescer(consumerPrefetch: 500)
        for tag: UInt64 in 1...20 {
            far.delivered(tag, now: 0)
            far.ack(tag, now: 5_000 * ms)
        }
        #expect(Self.close(far.typicalJobTime, 5_000 * ms))
        #expect(far.holdLimit == AckCoalescer.longestHold)
    }

    /// The window grew: the consumer was replaced on the same channel with a larger prefetch. The
    /// batch and the hold follow it, and the delivery times of what is outstanding are kept.
    @Test func aResizedChannelTakesTheNewPrefetchAndKeepsItsDeliveryTimes() {
        let ms: UInt64 = 1_000_000
        var acks = AckCoalescer(consumerPrefetch: 500)
        for tag: UInt64 in 1...1_000 { acks.delivered(tag, now: tag * ms) }
        acks.resize(forPrefetch: 2_000)
        #expect(acks.maxHeld == 1_000 && acks.batch == 64)
        acks.ack(700, now: 760 * ms)
        #expect(Self.close(acks.typicalJobTime, 60 * ms), "tag 700's delivery time survived the resize")
        acks.resize(forPrefetch: 100)
        #expect(acks.maxHeld == AckCoalescer.defaultMaxHeld && acks.batch == 12)
    }

    /// Delivery times are kept in units of 1,024 ns: equal to within 0.1 %.
    private static func close(_ measured: UInt64, _ expected: UInt64) -> Bool {
        (measured > expected ? measured - expected : expected - measured) <= expected / 1_000
    }

    @Test func tooManyHeldAcksGoOutAtOnce() {
        var acks = AckCoalescer(maxDelay: .max, maxHeld: 3)
        acks.ack(2, now: 0)
        acks.ack(3, now: 0)
        #expect(acks.flush(now: 0) == [])
        acks.ack(4, now: 0)
        #expect(acks.flush(now: 0) == [.ackOne(2), .ackOne(3), .ackOne(4)])
    }

    @Test func aMultipleAckNeverNamesATagSettledElsewhere() {
        var acks = AckCoalescer()
        acks.ack(1, now: 0)
        acks.settledElsewhere(2)  // nacked: no longer outstanding on the broker
        acks.ack(3, now: 0)
        acks.settledElsewhere(4)
        #expect(acks.flush(now: 0) == [.ackThrough(3)])
        #expect(acks.settledThrough == 4)
        // Nothing waits, so nothing to send.
        acks.settledElsewhere(5)
        #expect(acks.flush(now: 0) == [])
        #expect(acks.settledThrough == 5)
    }

    @Test func forcedFlushSendsEverythingBeforeAClose() {
        var acks = AckCoalescer(maxDelay: .max, maxHeld: 1000)
        for tag: UInt64 in [1, 3, 6] { acks.ack(tag, now: 0) }
        #expect(acks.flush(now: 0, force: true) == [.ackThrough(1), .ackOne(3), .ackOne(6)])
        #expect(acks.waitingCount == 0)
    }

    @Test func repeatedAndStaleAcksAreIgnored() {
        var acks = AckCoalescer()
        acks.ack(1, now: 0)
        acks.ack(1, now: 0)
        #expect(acks.flush(now: 0) == [.ackThrough(1)])
        acks.ack(1, now: 0)
        #expect(acks.flush(now: 0) == [])
    }

    /// Random completion orders: whatever the order and the flush points, every tag ends up
    /// acknowledged exactly once, and no multiple ack ever covers an unfinished tag.
    @Test(arguments: 1...40 as ClosedRange<UInt64>)
    func randomOrdersSettleEveryTagOnceAndNeverAnUnfinishedOne(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        let count: UInt64 = 300
        var order = Array(1...count)
        for i in order.indices.reversed() { order.swapAt(i, Int(random.next() % UInt64(i + 1))) }
        var acks = AckCoalescer(maxDelay: 50, maxHeld: 16, batch: Int(seed % 5) + 1, batchDelay: 20)
        var finished = Set<UInt64>()
        var brokerOutstanding = Set(1...count)
        var now: UInt64 = 0
        for tag in order {
            now += random.next() % 10
            finished.insert(tag)
            if random.next() % 7 == 0 {
                acks.settledElsewhere(tag)
                brokerOutstanding.remove(tag)
            } else {
                acks.ack(tag, now: now)
            }
            guard random.next() % 3 == 0 else { continue }
            apply(acks.flush(now: now), finished: finished, outstanding: &brokerOutstanding)
        }
        apply(acks.flush(now: now, force: true), finished: finished, outstanding: &brokerOutstanding)
        #expect(brokerOutstanding.isEmpty)
        #expect(acks.settledThrough == count)
    }

    private func apply(_ frames: [AckCoalescer.Frame], finished: Set<UInt64>, outstanding: inout Set<UInt64>) {
        for frame in frames {
            switch frame {
            case .ackThrough(let tag):
                #expect(outstanding.contains(tag), "a multiple ack names an outstanding tag")
                for covered in outstanding where covered <= tag {
                    #expect(finished.contains(covered), "tag \(covered) acked before its job finished")
                    outstanding.remove(covered)
                }
            case .ackOne(let tag):
                #expect(outstanding.remove(tag) != nil, "tag \(tag) acked twice")
                #expect(finished.contains(tag))
            }
        }
    }
}
