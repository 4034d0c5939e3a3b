import APNSCore
import Metrics
import Synchronization

/// The statistics stage: counters, gauges and timers with fixed, small label sets (bundle ID,
/// end, attempt bucket), created through swift-metrics so any backend (Prometheus in
/// `APNSAdmin`) can read them; and the same counts kept in process, with per-minute rates, for
/// the admin page and `/api/status` (`snapshot`).
public final class WorkerStatistics: Sendable {
    /// What one bundle has done since the process started.
    public struct BundleActivity: Sendable, Hashable, Codable {
        /// Jobs brought to each end (`OutcomeRouter.End` raw values), every end present.
        public var jobs: [String: Int]
        /// Jobs brought to each end in the last minute, every end present.
        public var perMinute: [String: Int]
        /// Jobs being processed right now.
        public var inFlight: Int

        init(_ tally: Tally, atSecond second: Int64) {
            var jobs: [String: Int] = [:]
            var perMinute: [String: Int] = [:]
            for end in OutcomeRouter.End.allCases {
                jobs[end.rawValue] = tally.ended[end, default: 0]
                perMinute[end.rawValue] = tally.rates[end, default: MinuteRate()].perMinute(atSecond: second)
            }
            self.jobs = jobs
            self.perMinute = perMinute
            self.inFlight = tally.inFlight
        }
    }

    struct Tally: Sendable {
        var ended: [OutcomeRouter.End: Int] = [:]
        var rates: [OutcomeRouter.End: MinuteRate] = [:]
        var inFlight = 0
    }

    /// Retry attempts above this share one label value (`"5+"`), so the label set stays fixed
    /// whatever `[retry] maxAttempts` says.
    static let attemptBuckets = 5

    private let tallies: Mutex<[String: Tally]> = Mutex([:])
    private let origin: ContinuousClock.Instant
    private let now: @Sendable () -> ContinuousClock.Instant

    /// - Parameter now: the clock of the per-minute rates; tests move it forward.
    public init(now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.now = now
        self.origin = now()
    }

    /// Every bundle's activity so far, by bundle ID; bundles that saw no job yet are absent.
    public func snapshot() -> [String: BundleActivity] {
        let second = currentSecond()
        return tallies.withLock { $0.mapValues { BundleActivity($0, atSecond: second) } }
    }

    /// One bundle's activity; all zeros when it has seen no job yet.
    public func activity(bundle: String) -> BundleActivity {
        let second = currentSecond()
        return tallies.withLock { BundleActivity($0[bundle] ?? Tally(), atSecond: second) }
    }

    private func currentSecond() -> Int64 {
        origin.duration(to: now()).components.seconds
    }

    func jobStarted(bundle: String) {
        tallies.withLock { $0[bundle, default: Tally()].inFlight += 1 }
        Meter(label: "apns_worker_jobs_in_flight", dimensions: [("bundle", bundle)]).increment()
    }

    func jobFinished(bundle: String) {
        tallies.withLock { $0[bundle, default: Tally()].inFlight -= 1 }
        Meter(label: "apns_worker_jobs_in_flight", dimensions: [("bundle", bundle)]).decrement()
    }

    func jobReceived(bundle: String) {
        Counter(label: "apns_worker_jobs_received_total", dimensions: [("bundle", bundle)]).increment()
    }

    func jobEnded(bundle: String, end: OutcomeRouter.End, after: Duration) {
        let second = currentSecond()
        tallies.withLock {
            $0[bundle, default: Tally()].ended[end, default: 0] += 1
            $0[bundle, default: Tally()].rates[end, default: MinuteRate()].record(atSecond: second)
        }
        Counter(label: "apns_worker_jobs_total", dimensions: [("bundle", bundle), ("outcome", end.rawValue)]).increment()
        Timer(label: "apns_worker_job_duration_seconds", dimensions: [("bundle", bundle)]).recordNanoseconds(after.nanoseconds)
    }

    /// A send to APNs ended in a retry; `attempt` counts that send (1 for the first).
    func retryScheduled(bundle: String, attempt: Int) {
        let bucket = attempt >= Self.attemptBuckets ? "\(Self.attemptBuckets)+" : "\(max(attempt, 1))"
        Counter(label: "apns_worker_retries_total", dimensions: [("bundle", bundle), ("attempt", bucket)]).increment()
    }

    func apnsAnswered(bundle: String, after: Duration) {
        Timer(label: "apns_worker_apns_latency_seconds", dimensions: [("bundle", bundle)]).recordNanoseconds(after.nanoseconds)
    }

    /// 1 while a provider fault holds the bundle and its consumer is paused, 0 otherwise.
    func bundleHeld(bundle: String, _ held: Bool) {
        Gauge(label: "apns_worker_consumer_paused", dimensions: [("bundle", bundle)]).record(held ? 1 : 0)
    }
}

