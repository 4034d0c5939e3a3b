import Synchronization

/// How loud a bundle's hold is told (contract §4: one loud line per hold, not one per job or per
/// flap), with no IO: the first hold is an error and its end a notice; a hold that begins again
/// for the same reason within `quiet` of the last one's end is that fault met again (a topic the
/// key lacks, refused anew at the next job of it after a probe of another topic succeeded), and
/// it and its end are info lines. Any other reason, or the same one after a quiet spell, is loud
/// again.
struct HoldAlerts<Instant: InstantProtocol>: Sendable where Instant.Duration == Duration {
    /// How long after a hold's end the same fault still counts as that hold.
    static var quiet: Duration { .seconds(600) }

    private var lastReason: String?
    private var lastEnd: Instant?
    /// Whether the hold under way was told loudly.
    private var loud = true

    init() {}

    /// A hold began: whether to tell it loudly.
    mutating func held(reason: String, now: Instant) -> Bool {
        let again = reason == lastReason && lastEnd.map { $0.duration(to: now) <= Self.quiet } == true
        lastReason = reason
        lastEnd = nil
        loud = !again
        return loud
    }

    /// The hold ended: whether to tell it loudly (as loud as its beginning).
    mutating func resumed(now: Instant) -> Bool {
        lastEnd = now
        return loud
    }
}

/// A pipeline's `HoldAlerts` under a lock: news comes from any thread.
final class HoldAlertLog: Sendable {
    private let alerts = Mutex(HoldAlerts<ContinuousClock.Instant>())

    func held(reason: String, now: ContinuousClock.Instant) -> Bool { alerts.withLock { $0.held(reason: reason, now: now) } }
    func resumed(now: ContinuousClock.Instant) -> Bool { alerts.withLock { $0.resumed(now: now) } }
}
