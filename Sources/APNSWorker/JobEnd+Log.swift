import APNSModel
import Logging

/// The one line each `JobEnd` is logged with, in the same words as its counts (the pipeline adds
/// `job.end`, the end's `label`, as in `apns_worker_jobs_total{outcome}`): every settled job of a
/// bundle's pipeline, sent or not, gets this line and no other (`BundlePipeline.report`).
extension JobEnd {
    /// The message and level of a job's end line. A delivered job's line is debug: at thousands
    /// of jobs a second one line each costs more than the job's own work
    /// (`APNS_WORKER_LOG_LEVEL=debug` turns it on). A held job's is debug too: the breaker
    /// announces the hold once, not once per job.
    var logLine: (message: Logger.Message, level: Logger.Level) {
        switch self {
        case .delivered: ("job delivered", .debug)
        case .invalidToken: ("job's token or channel invalid: feedback event published", .info)
        case .retry: ("job will be retried", .info)
        case .dead: ("job dead-lettered", .warning)
        case .held: ("job held: back to its work queue until the bundle's hold ends", .debug)
        case .gated: ("job gated: back in the first retry queue, no attempt spent", .debug)
        // The registry's ends; it logs them per group job (`GroupFanOut`), not per notification.
        case .fannedOut: ("group job notification published at once", .debug)
        case .coalesced: ("group job notification merged into a trailing push", .debug)
        case .trailing: ("trailing push published", .debug)
        }
    }
}
