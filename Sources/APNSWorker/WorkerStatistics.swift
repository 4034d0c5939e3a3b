import APNSModel
import Metrics
import Synchronization

/// The statistics stage: counters, gauges and timers with fixed, small label sets (bundle ID,
/// end, attempt bucket), created through swift-metrics so any backend (Prometheus in
/// `APNSAdmin`) can read them; and the same counts kept in process, with per-minute rates, for
/// the admin page and `/api/status` (`snapshot`).
///
/// Each bundle records through its own `BundleStatistics`, made once with every metric handle
/// it needs: asking the metrics factory for a handle on every job (a lookup under a lock and a
/// label check) cost more than the counting itself.
public final class WorkerStatistics: Sendable {
    /// What one bundle has done since the process started.
    public struct BundleActivity: Sendable, Hashable, Codable {
        /// Jobs brought to each of `JobEnd.pipelineEnds` (by `label`), every one present.
        public var jobs: [String: Int]
        /// Jobs brought to each end in the last minute, every end present.
        public var perMinute: [String: Int]
        /// Jobs being processed right now (the bundle consumer's own count).
        public var inFlight: Int

        init(_ tally: Tally, inFlight: Int, atSecond second: Int64) {
            var jobs: [String: Int] = [:]
            var perMinute: [String: Int] = [:]
            for (index, end) in JobEnd.pipelineEnds.enumerated() {
                jobs[end.label] = tally.ended[index]
                perMinute[end.label] = tally.rates[index].perMinute(atSecond: second)
            }
            self.jobs = jobs
            self.perMinute = perMinute
            self.inFlight = inFlight
        }
    }

    struct Tally: Sendable {
        var ended = [Int](repeating: 0, count: JobEnd.pipelineEnds.count)
        var rates = [MinuteRate](repeating: MinuteRate(), count: JobEnd.pipelineEnds.count)
    }

    /// Retry attempts above this share one label value (`"5+"`), so the label set stays fixed
    /// whatever `[retry] maxAttempts` says.
    static let attemptBuckets = 5

    private let bundles: Mutex<[String: BundleStatistics]> = Mutex([:])
    fileprivate let origin: ContinuousClock.Instant
    fileprivate let now: @Sendable () -> ContinuousClock.Instant

    /// - Parameter now: the clock of the per-minute rates; tests move it forward.
    public init(now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.now = now
        self.origin = now()
    }

    /// The recorder of one bundle, made on first use with all of its metric handles.
    public func bundle(_ bundleID: String) -> BundleStatistics {
        bundles.withLock { bundles in
            if let existing = bundles[bundleID] { return existing }
            let made = BundleStatistics(bundleID: bundleID, statistics: self)
            bundles[bundleID] = made
            return made
        }
    }

    /// Every bundle's activity so far, by bundle ID; bundles that saw no job yet are absent.
    public func snapshot() -> [String: BundleActivity] {
        let second = currentSecond()
        let all = bundles.withLock { $0 }
        var activity: [String: BundleActivity] = [:]
        for (bundleID, recorder) in all {
            guard let tally = recorder.tallyIfUsed() else { continue }
            activity[bundleID] = BundleActivity(tally, inFlight: recorder.inFlightNow, atSecond: second)
        }
        return activity
    }

    /// One bundle's activity; all zeros when it has seen no job yet.
    public func activity(bundle: String) -> BundleActivity {
        let recorder = bundles.withLock { $0[bundle] }
        return BundleActivity(recorder?.tallyIfUsed() ?? Tally(), inFlight: recorder?.inFlightNow ?? 0, atSecond: currentSecond())
    }

    fileprivate func currentSecond() -> Int64 {
        origin.duration(to: now()).components.seconds
    }
}

/// What one bundle's pipeline records, through handles made once.
public final class BundleStatistics: Sendable {
    private let statistics: WorkerStatistics
    private let tally = Mutex<(WorkerStatistics.Tally, used: Bool)>((WorkerStatistics.Tally(), false))
    private let inFlight: Meter
    private let received: Counter
    private let ended: [Counter]
    private let duration: Metrics.Timer
    private let apnsLatency: Metrics.Timer
    private let retries: [Counter]
    /// The bundle consumer's in-flight count (`QueueConsumer.inFlight`), the one count kept: set
    /// once by the pipeline; read for the status, never counted here.
    private let inFlightSource = Mutex<(@Sendable () -> Int)?>(nil)

    fileprivate init(bundleID bundle: String, statistics: WorkerStatistics) {
        self.statistics = statistics
        let label = [("bundle", bundle)]
        inFlight = Meter(label: "apns_worker_jobs_in_flight", dimensions: label)
        received = Counter(label: "apns_worker_jobs_received_total", dimensions: label)
        ended = JobEnd.pipelineEnds.map {
            Counter(label: "apns_worker_jobs_total", dimensions: [("bundle", bundle), ("outcome", $0.label)])
        }
        duration = Metrics.Timer(label: "apns_worker_job_duration_seconds", dimensions: label)
        apnsLatency = Metrics.Timer(label: "apns_worker_apns_latency_seconds", dimensions: label)
        retries = (1...WorkerStatistics.attemptBuckets).map { attempt in
            let bucket = attempt == WorkerStatistics.attemptBuckets ? "\(attempt)+" : "\(attempt)"
            return Counter(label: "apns_worker_retries_total", dimensions: [("bundle", bundle), ("attempt", bucket)])
        }
    }

    fileprivate func tallyIfUsed() -> WorkerStatistics.Tally? {
        tally.withLock { $0.used ? $0.0 : nil }
    }

    /// Where the in-flight count is read from (the bundle's consumer machine).
    func countInFlight(_ source: @escaping @Sendable () -> Int) {
        inFlightSource.withLock { $0 = source }
    }

    fileprivate var inFlightNow: Int {
        inFlightSource.withLock { $0 }?() ?? 0
    }

    /// A job started: the bundle is seen, and the in-flight metric (exported as the consumer
    /// counts, moved at the same start and end) goes up.
    func jobStarted() {
        tally.withLock { $0.used = true }
        inFlight.increment()
    }

    func jobFinished() {
        inFlight.decrement()
    }

    func jobReceived() {
        received.increment()
    }

    /// A job reached `end`, one of `JobEnd.pipelineEnds` (the registry's group ends are not
    /// counted here).
    func jobEnded(_ end: JobEnd, after elapsed: Duration) {
        guard let index = end.pipelineIndex else { return }
        let second = statistics.currentSecond()
        tally.withLock {
            $0.0.ended[index] += 1
            $0.0.rates[index].record(atSecond: second)
            $0.used = true
        }
        ended[index].increment()
        duration.recordNanoseconds(elapsed.nanoseconds)
    }

    /// A send to APNs ended in a retry; `attempt` counts that send (1 for the first).
    func retryScheduled(attempt: Int) {
        retries[min(max(attempt, 1), WorkerStatistics.attemptBuckets) - 1].increment()
    }

    func apnsAnswered(after elapsed: Duration) {
        apnsLatency.recordNanoseconds(elapsed.nanoseconds)
    }
}

extension JobEnd {
    /// Position in `pipelineEnds`, for per-end arrays; nil for the registry's group ends.
    var pipelineIndex: Int? {
        switch self {
        case .delivered: 0
        case .invalidToken: 1
        case .retry: 2
        case .dead: 3
        case .held: 4
        case .gated: 5
        case .fannedOut, .coalesced, .trailing: nil
        }
    }
}
