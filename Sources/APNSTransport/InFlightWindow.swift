/// How many notifications one pool (credential + environment) should keep in flight, as a pure
/// value (docs/decisions.md "The in-flight window"): measured round trip and completion
/// rate in, a target out. No clock of its own: every event is given the monotonic time in
/// nanoseconds, so tests drive it with plain numbers.
///
/// The rule, evaluated once per period (at least `minimumPeriod`, at least one round trip):
/// - **Little's law with headroom**: what the path holds is rate × the least round trip seen
///   lately (the propagation delay, without queueing); the window asks for `gain` × that;
/// - **growth while full**: when the window was full during the period (the consumer keeps it
///   full only while the queue has a backlog), the target may at most double once a round
///   trip, like TCP's slow start; when it was not full it never grows, and shrinks towards what
///   was used;
/// - **bounds**: never under `floor` (the bundle's starting prefetch), never over `ceiling`
///   (its share of the process budget, `[amqp] maxInFlight`) nor over what the open connections'
///   streams allow (`streamCapacity`, when that is above the floor).
///
/// When the rest of the path is the bottleneck (CPU, the sink), more in flight only queues: the
/// round trips grow while the least one does not, so rate × least round trip stops rising and
/// the target settles at about `gain` × what the path can really use.
package struct InFlightWindow: Sendable, Hashable {
    /// Headroom over rate × round trip.
    package static let gain = 2
    /// A period shorter than this counts too few answers to measure a rate.
    package static let minimumPeriod: UInt64 = 20_000_000
    /// The least round trip is forgotten after this long, so a slower route is learned.
    package static let minimumRTTLifetime: UInt64 = 10_000_000_000

    /// The window now.
    package private(set) var target: Int
    /// The least the window asks for (the starting prefetch).
    package let floor: Int
    /// The most: this pool's share of the process budget.
    package let ceiling: Int
    /// Sends begun and not yet ended.
    package private(set) var inFlight = 0
    /// Completions per second over the last period; nil before the first.
    package private(set) var rate: Double?
    /// The least answered round trip lately (nanoseconds); nil before the first answer.
    package private(set) var minimumRTT: UInt64?

    private var minimumRTTSince: UInt64 = 0
    private var periodStart: UInt64
    private var periodCompletions = 0
    private var periodPeakInFlight = 0
    private var periodMinimumRTT: UInt64 = .max

    /// - Parameters:
    ///   - floor: where the window starts and the least it asks for (at least 1).
    ///   - ceiling: the most it asks for (raised to `floor` if below it).
    ///   - now: monotonic nanoseconds.
    package init(floor: Int, ceiling: Int, now: UInt64) {
        self.floor = max(1, floor)
        self.ceiling = max(self.floor, ceiling)
        self.target = self.floor
        self.periodStart = now
    }

    /// A send began (it may wait for a stream: waiting is in flight too, Little's law counts it).
    package mutating func sent() {
        inFlight += 1
        if inFlight > periodPeakInFlight { periodPeakInFlight = inFlight }
    }

    /// A send ended; `rtt`: nanoseconds from the request's write on a stream to its answer. The
    /// wait for a stream or a connection before the write is in flight too (Little's law counts
    /// it) but is not the path's delay: counted, a drain's first answers (after a connection's set-up and
    /// the one stream Apple allows until then) set the least round trip, and with it the period,
    /// to several round trips, and the window grew that much later. `answered`: APNs answered
    /// (a failure's duration is a deadline or a dead connection, no round trip). Returns the new
    /// target when it changed.
    /// - Parameter streamCapacity: the streams the pool's connections allow now.
    package mutating func ended(rtt: UInt64, answered: Bool, now: UInt64, streamCapacity: Int) -> Int? {
        inFlight = max(0, inFlight - 1)
        periodCompletions += 1
        if answered, rtt < periodMinimumRTT { periodMinimumRTT = rtt }
        return evaluateIfDue(now: now, streamCapacity: streamCapacity)
    }

    /// The period in nanoseconds: the least round trip, at least `minimumPeriod`.
    package var period: UInt64 {
        max(Self.minimumPeriod, minimumRTT ?? 0)
    }

    private mutating func evaluateIfDue(now: UInt64, streamCapacity: Int) -> Int? {
        guard now >= periodStart, now - periodStart >= period else { return nil }
        let elapsed = now - periodStart
        updateMinimumRTT(now: now)
        let rate = Double(periodCompletions) * 1e9 / Double(elapsed)
        self.rate = rate
        // Full: the peak reached 90 % of the target (rounding and answers in the same instant).
        let full = periodPeakInFlight * 10 >= target * 9
        periodStart = now
        periodCompletions = 0
        periodPeakInFlight = inFlight
        periodMinimumRTT = .max
        let next = Self.next(
            target: target, full: full, rate: rate, minimumRTT: minimumRTT, floor: floor, ceiling: ceiling,
            streamCapacity: streamCapacity)
        guard next != target else { return nil }
        target = next
        return next
    }

    private mutating func updateMinimumRTT(now: UInt64) {
        guard periodMinimumRTT != .max else { return }
        if let current = minimumRTT, periodMinimumRTT >= current, now - minimumRTTSince < Self.minimumRTTLifetime { return }
        minimumRTT = periodMinimumRTT
        minimumRTTSince = now
    }

    /// The rule itself, on plain values (see the type's comment).
    package static func next(
        target: Int, full: Bool, rate: Double, minimumRTT: UInt64?, floor: Int, ceiling: Int, streamCapacity: Int
    ) -> Int {
        let upper = min(ceiling, max(floor, streamCapacity))
        // Without an answered round trip there is no evidence to grow on.
        guard let minimumRTT else { return min(max(floor, target), upper) }
        let wanted = (rate * Double(minimumRTT) / 1e9 * Double(gain)).rounded(.up)
        let growth = full ? target.multipliedReportingOverflow(by: 2).partialValue : target
        let proposed = wanted >= Double(growth) ? growth : Int(wanted)
        return min(max(floor, proposed), upper)
    }
}
