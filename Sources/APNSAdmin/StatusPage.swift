/// The view model of the admin HTML page: the worker's status, queue depths and dead jobs turned
/// into the plain strings and numbers `Templates.statusPage` shows (Mustache escapes them all).
import APNSCore
import APNSOperations
import APNSWorker
import Foundation
import Mustache

struct StatusPage {
    let status: WorkerStatus
    let depths: [QueueDepth]?
    let queueError: String?
    let deadJobs: [QueuedJob]
    let limit: Int

    func render() -> String {
        Templates.library.render(context, withTemplate: "status") ?? ""
    }

    var context: [String: Any] {
        let shown = Array(deadJobs.prefix(limit))
        var context: [String: Any] = [
            "broker": status.broker,
            "ready": status.isReady ? "yes" : "no",
            "generatedAt": Self.timestamp(Date()),
            "bundles": status.bundles.map(bundleRow),
            "deadJobs": shown.map(jobRow),
            "deadJobsTruncated": deadJobs.count > limit,
            "deadJobsShown": shown.count,
        ]
        if let queueError { context["queueError"] = queueError }
        return context
    }

    func bundleRow(_ bundle: WorkerStatus.Bundle) -> [String: Any] {
        // Keyed by the ends' raw values (the JSON API's names); read through the enum so a
        // renamed end cannot silently show zeros here.
        let jobs = { (end: OutcomeRouter.End) in bundle.activity.jobs[end.rawValue, default: 0] }
        let perMinute = { (end: OutcomeRouter.End) in bundle.activity.perMinute[end.rawValue, default: 0] }
        let totals = depths.map { QueueTotals(depths: $0, bundleID: bundle.bundleID) }
        let connections = bundle.connections.isEmpty
            ? "-" : bundle.connections.sorted { $0.key < $1.key }.filter { $0.value > 0 }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        return [
            "bundleID": bundle.bundleID,
            "held": bundle.held,
            "heldText": bundle.held ? "yes" : "no",
            "delivered": jobs(.delivered),
            "invalidToken": jobs(.invalidToken),
            "retried": jobs(.retry),
            "dead": jobs(.dead),
            "deliveredPerMinute": perMinute(.delivered),
            "retriedPerMinute": perMinute(.retry),
            "deadPerMinute": perMinute(.dead),
            "inFlight": bundle.activity.inFlight,
            "connections": connections.isEmpty ? "none" : connections,
            "workDepth": totals.map { "\($0.work)" } ?? "?",
            "retryDepth": totals.map { "\($0.retry)" } ?? "?",
            "deadDepth": totals.map { "\($0.dead)" } ?? "?",
        ]
    }

    func jobRow(_ job: QueuedJob) -> [String: Any] {
        var row: [String: Any] = [
            "bundleID": job.bundleID,
            "jobID": job.jobID ?? "-",
            "reason": job.reason ?? "-",
            "status": job.status.map(String.init) ?? "-",
            "attempts": job.attempts.map(String.init) ?? "-",
            "failedAt": job.failedAt.map(Self.timestamp) ?? "-",
            "token": job.tokenRedacted ?? "-",
            "error": job.error ?? "",
            "body": JobInspection.redactingToken(job.body),
        ]
        // A job without an id cannot be selected for a requeue: no button.
        if let jobID = job.jobID, let encoded = jobID.addingPercentEncoding(withAllowedCharacters: .urlPathSegmentAllowed) {
            row["requeuePath"] = "/dead/\(encoded)/requeue"
        }
        return row
    }

    static func timestamp(_ date: Date) -> String {
        date.formatted(.iso8601)
    }
}

extension CharacterSet {
    /// Unreserved characters only, so an id cannot add path segments or a query.
    static let urlPathSegmentAllowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
}
