// When the connection's owner thread sleeps between turns of its serve loop, for how long, and
// how early an ack counts as asked for. Pure: the coalescers and the time are passed in, so it
// is tested without a thread or a broker (`ServeScheduleTests`).

/// The serve loop's timing decisions. One turn of the loop carries out the queued commands,
/// sends the acks that are due and reads the frames available; when a turn found nothing to
/// do, the thread sleeps (`sleep(after:…)`) until the socket is readable, a command wakes it
/// (`WakeDecision`) or the sleep's timeout passes.
struct ServeSchedule: Sendable {
    /// How the thread sleeps after an idle turn.
    struct Sleep: Sendable, Hashable {
        /// Longest sleep: the poll interval, cut short by the next ack deadline.
        var timeout: Duration
        /// Set when a consumer channel expects acks soon (`AckCoalescer.expectsAcks`): the
        /// sleep is brief (at most the shortest batch delay) and acks wake the thread only once
        /// this many are queued (`WakeDecision.goingToSleep(ackBatch:)`).
        var ackBatch: Int?
    }

    /// When the current brief sleep began, if the thread is in one or just left one.
    private(set) var briefSleepStart: UInt64?

    /// The thread took queued commands at `now`: when they count as asked for. After a brief
    /// sleep every command taken was queued during it, so an ack counts from the start of the
    /// sleep and never waits longer than its batch delay.
    mutating func commandsTaken(now: UInt64) -> UInt64 {
        defer { briefSleepStart = nil }
        return briefSleepStart ?? now
    }

    /// A turn took no command: a brief sleep it followed is over.
    mutating func noCommands() {
        briefSleepStart = nil
    }

    /// The thread goes to sleep at `now` as `sleep` says.
    mutating func sleeping(_ sleep: Sleep, now: UInt64) {
        briefSleepStart = sleep.ackBatch == nil ? nil : now
    }

    /// How to sleep after a turn that found nothing to do, given the ack coalescers of the open
    /// consumer channels: no longer than `pollInterval` nor past the next held ack's deadline;
    /// briefly, waiting for a batch of acks, when a channel expects acks soon.
    static func sleep(pollInterval: Duration, acks coalescers: some Sequence<AckCoalescer>, now: UInt64) -> Sleep {
        var timeout = pollInterval
        var briefDelay: UInt64?
        var batch: Int?
        for acks in coalescers {
            if let deadline = acks.nextDeadline() {
                timeout = min(timeout, deadline > now ? .nanoseconds(Int64(clamping: deadline - now)) : .zero)
            }
            if acks.expectsAcks(now: now) {
                briefDelay = min(briefDelay ?? acks.batchDelay, acks.batchDelay)
                batch = min(batch ?? acks.batch, acks.batch)
            }
        }
        if let briefDelay { timeout = min(timeout, .nanoseconds(Int64(clamping: briefDelay))) }
        return Sleep(timeout: timeout, ackBatch: batch)
    }
}
