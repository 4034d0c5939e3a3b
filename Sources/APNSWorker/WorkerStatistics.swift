import Metrics

/// The statistics stage: counters and timers with fixed, small label sets (bundle ID and end),
/// created through swift-metrics so any backend (Prometheus in `APNSAdmin`) can read them.
public final class WorkerStatistics: Sendable {
    public init() {}

    func jobReceived(bundle: String) {
        Counter(label: "apns_worker_jobs_received_total", dimensions: [("bundle", bundle)]).increment()
    }

    func jobEnded(bundle: String, end: OutcomeRouter.End, after: Duration) {
        Counter(label: "apns_worker_jobs_total", dimensions: [("bundle", bundle), ("outcome", end.rawValue)]).increment()
        Timer(label: "apns_worker_job_duration_seconds", dimensions: [("bundle", bundle)]).recordNanoseconds(after.nanoseconds)
    }

    func apnsAnswered(bundle: String, after: Duration) {
        Timer(label: "apns_worker_apns_latency_seconds", dimensions: [("bundle", bundle)]).recordNanoseconds(after.nanoseconds)
    }

    func bundleHeld(bundle: String, _ held: Bool) {
        Gauge(label: "apns_worker_bundle_held", dimensions: [("bundle", bundle)]).record(held ? 1 : 0)
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
