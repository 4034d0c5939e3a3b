/// The view model of the admin HTML page: the fleet (every instance's latest heartbeat, fleet
/// totals and rates), this worker's own status, queue depths and latency, and the retry and dead
/// jobs, turned into the plain strings and numbers `Templates.statusPage` shows (Mustache
/// escapes them all).
import APNSFleet
import APNSModel
import APNSTopology
import APNSOperations
import APNSTopologyNames
import APNSWorker
import Foundation
import Mustache

struct StatusPage {
    let status: WorkerStatus
    /// Nil when this process runs no fleet service (tests of the admin routes alone).
    let fleet: FleetReport?
    let fleetView: FleetView?
    let instanceID: String?
    let depths: [QueueDepth]?
    let retryDelays: [Duration]
    let queueError: String?
    let deadJobs: [QueuedJob]
    let retryJobs: [QueuedJob]
    let deadFilter: JobFilter
    /// Matching dead jobs before this page (`?offset=`).
    var deadOffset = 0
    let limit: Int
    var now = Date()
    /// Why the dead (retry) jobs could not be read, or not all of them: the page says so, and
    /// never "No dead jobs." for a listing that could not be read.
    var deadUnreadable: String? = nil
    var retryUnreadable: String? = nil

    func render() -> String {
        Templates.library.render(context, withTemplate: "status") ?? ""
    }

    var context: [String: Any] {
        let shownDead = Array(deadJobs.prefix(limit))
        let shownRetry = Array(retryJobs.prefix(limit))
        // What the page draws of the fleet's bundles, summed once for the whole page (every
        // bundle row and queue row reads the sums): this instance's bundles and the busiest
        // others, however many a forged view holds (a row each passed 256 MiB).
        let summary = bundleSummary
        let totals = summary?.totals ?? [:]
        let bundles = summary?.shown ?? status.bundles.map(\.bundleID)
        let instances = fleet?.instances ?? []
        var context: [String: Any] = [
            "broker": status.broker,
            "ready": status.isReady ? "yes" : "no",
            "instanceID": instanceID ?? "-",
            "generatedAt": Self.timestamp(now),
            "instances": instances.prefix(Self.maxInstanceRows).map(instanceRow),
            "instanceCount": fleet?.instances.count ?? 1,
            "bundles": bundles.map { bundleRow($0, totals: totals) },
            "pools": status.pools.map(poolRow),
            "hasPools": !status.pools.isEmpty,
            "queues": (depths ?? []).map { queueRow($0, totals: totals) },
            "retryJobs": shownRetry.map { jobRow($0, kind: .retry) },
            "retryJobsTruncated": retryJobs.count > limit,
            "retryJobsShown": shownRetry.count,
            "deadJobs": shownDead.map { jobRow($0, kind: .dead) },
            "deadJobsTruncated": deadJobs.count > limit,
            "deadJobsShown": shownDead.count,
            "deadFirst": deadOffset + 1,
            "deadLast": deadOffset + shownDead.count,
            "deadNextPath": Self.path(
                "/", ["bundle": deadFilter.bundleID, "reason": deadFilter.reason, "offset": String(deadOffset + shownDead.count)]),
            "deadPaged": deadOffset > 0 || deadJobs.count > limit,
            "bundleChoices": bundles.map { ["value": $0, "selected": $0 == deadFilter.bundleID] },
            "deadReason": deadFilter.reason ?? "",
            "bulkRequeuePath": Self.path("/dead/confirm", ["action": "requeue", "bundle": deadFilter.bundleID, "reason": deadFilter.reason]),
            "bulkPurgePath": Self.path("/dead/confirm", ["action": "purge", "bundle": deadFilter.bundleID, "reason": deadFilter.reason]),
        ]
        if instances.count > Self.maxInstanceRows { context["instancesNotShown"] = instances.count - Self.maxInstanceRows }
        if let summary, summary.notShown > 0 { context["bundlesNotShown"] = summary.notShown }
        // Held and paused bundles are loud whichever rows are drawn, named up to a few.
        let held = summary.map { ($0.held, $0.heldCount) } ?? (status.heldBundles.sorted(), status.heldBundles.count)
        if held.1 > 0 { context["heldBundles"] = FleetBundleSummary.named(held.0, count: held.1) }
        if let paused = fleet?.paused, !paused.isEmpty { context["pausedBundles"] = FleetBundleSummary.named(paused) }
        if let configuration = status.configuration {
            var shown: [String: Any] = [
                "loadedAt": Self.timestamp(configuration.loadedAt), "fingerprint": configuration.fingerprint,
                "bundleCount": configuration.bundles.count,
            ]
            if !configuration.pendingRestart.isEmpty { shown["pendingRestart"] = configuration.pendingRestart.joined(separator: ", ") }
            context["configuration"] = shown
        }
        if let queueError { context["queueError"] = queueError }
        for (kind, why, shown) in [("dead", deadUnreadable, shownDead.count), ("retry", retryUnreadable, shownRetry.count)] {
            guard let why else { continue }
            context["\(kind)Unreadable"] = why
            context["\(kind)PartlyUnreadable"] = shown > 0
        }
        if fleet == nil { context["fleetMissing"] = true }
        return context
    }

    /// Rows of instances the page draws (in the order of `FleetView.live`); the rest are counted
    /// in a line, and `GET /api/fleet` pages through them all.
    static let maxInstanceRows = 100

    var fleetTotals: [String: FleetInstance.Bundle] { fleetView?.totals(now: now) ?? [:] }

    /// This instance's bundles first, then the busiest of those other instances run (at most
    /// `FleetBundleSummary.defaultLimit`); nil without a fleet view.
    var bundleSummary: FleetBundleSummary? {
        fleetView.map { FleetBundleSummary(view: $0, own: status.bundles.map(\.bundleID), held: status.heldBundles, now: now) }
    }

    func instanceRow(_ instance: FleetInstance) -> [String: Any] {
        [
            "id": instance.id, "isSelf": instance.id == instanceID, "host": instance.host, "pid": String(instance.pid),
            "version": instance.version, "startedAt": Self.timestamp(instance.startedAt),
            "lastSeen": instance.lastSeen.map { "\(Int(now.timeIntervalSince($0).rounded())) s ago" } ?? "-",
            "rss": String(format: "%.1f MiB", Double(instance.rssBytes) / 1_048_576),
            "cpu": String(format: "%.1f s", instance.cpuSeconds), "inFlight": String(instance.inFlight),
            "broker": instance.broker,
            "held": FleetBundleSummary.named(instance.heldBundles),
            "paused": FleetBundleSummary.named(instance.bundles.filter(\.value.paused).keys.sorted()),
        ]
    }

    func bundleRow(_ bundleID: String) -> [String: Any] { bundleRow(bundleID, totals: fleetTotals) }

    func bundleRow(_ bundleID: String, totals fleetTotals: [String: FleetInstance.Bundle]) -> [String: Any] {
        let local = status.bundles.first { $0.bundleID == bundleID }
        // The fleet's sums when heartbeats were heard, else this instance's own counts.
        let counts: FleetInstance.Bundle
        let perMinute: [JobEnd: Int]
        if let fleetView, let total = fleetTotals[bundleID] {
            counts = total
            perMinute = fleetView.rates.recent(now: now, seconds: 60, bundleID: bundleID)
        } else {
            let jobs = { (end: JobEnd) in local?.activity.jobs[end.label, default: 0] ?? 0 }
            let minute = { (end: JobEnd) in local?.activity.perMinute[end.label, default: 0] ?? 0 }
            counts = FleetInstance.Bundle(
                delivered: jobs(.delivered), invalidToken: jobs(.invalidToken), retry: jobs(.retry), dead: jobs(.dead),
                inFlight: local?.activity.inFlight ?? 0, held: local?.held ?? false, connections: local?.connections ?? [:])
            perMinute = [.delivered: minute(.delivered), .invalidToken: minute(.invalidToken), .retry: minute(.retry), .dead: minute(.dead)]
        }
        let paused = fleet?.paused.contains(bundleID) ?? false
        let held = counts.held || (local?.held ?? false)
        // Depths are read for this instance's bundles only.
        let totals = depths.flatMap { depths in depths.contains { $0.bundleID == bundleID } ? QueueTotals(depths: depths, bundleID: bundleID) : nil }
        let connections = counts.connections.sorted { $0.key < $1.key }.filter { $0.value > 0 }.map { "\($0.key) \($0.value)" }
        let state = [held ? "HELD" : nil, paused ? "PAUSED" : nil].compactMap { $0 }
        var row: [String: Any] = [
            "bundleID": bundleID,
            "state": state.isEmpty ? "running" : state.joined(separator: ", "),
            "alarming": !state.isEmpty,
            "delivered": counts.delivered, "invalidToken": counts.invalidToken, "retried": counts.retry, "dead": counts.dead,
            "deliveredPerMinute": perMinute[.delivered, default: 0], "invalidPerMinute": perMinute[.invalidToken, default: 0],
            "retriedPerMinute": perMinute[.retry, default: 0], "deadPerMinute": perMinute[.dead, default: 0],
            "inFlight": counts.inFlight,
            "connections": connections.isEmpty ? (status.pools.isEmpty ? "none" : "pooled (below)") : connections.joined(separator: ", "),
            "workDepth": totals.map { "\($0.work)" } ?? "?",
            "retryDepth": totals.map { "\($0.retry)" } ?? "?",
            "deadDepth": totals.map { "\($0.dead)" } ?? "?",
        ]
        // Only bundle IDs the routes accept get a button (they need no percent-encoding).
        if fleet != nil, FleetTopology.isPausable(bundleID) {
            row[paused ? "resumePath" : "pausePath"] = "/bundles/\(bundleID)/\(paused ? "resume" : "pause")"
        }
        return row
    }

    /// One connection pool of this instance: its connections, and the bundles sharing it named
    /// up to a few. A pool no job has needed yet is `idle`, which is not a fault.
    func poolRow(_ pool: WorkerStatus.Pool) -> [String: Any] {
        let connections = pool.connections.sorted { $0.key < $1.key }.filter { $0.value > 0 }.map { "\($0.key) \($0.value)" }
        return [
            "name": pool.name, "environment": pool.environment,
            "connections": connections.isEmpty ? "none" : connections.joined(separator: ", "),
            "bundleCount": pool.bundles.count, "bundles": FleetBundleSummary.named(pool.bundles),
        ]
    }

    func queueRow(_ depth: QueueDepth) -> [String: Any] { queueRow(depth, totals: fleetTotals) }

    func queueRow(_ depth: QueueDepth, totals fleetTotals: [String: FleetInstance.Bundle]) -> [String: Any] {
        var row: [String: Any] = [
            "queue": depth.queue, "role": depth.role, "messages": depth.messages, "consumers": depth.consumers, "delay": "", "latency": "",
        ]
        if depth.role == "retry",
            let delay = retryDelays.first(where: { TopologyNames.retryQueue(depth.bundleID, delay: $0) == depth.queue })
        {
            row["delay"] = TopologyNames.delayLabel(delay)
        }
        if depth.role == "work" {
            row["latency"] = QueueLatency.estimate(
                ready: depth.messages, consumers: depth.consumers,
                lastTakenPublishedAt: fleetTotals[depth.bundleID]?.lastTakenPublishedAt, now: now
            ).text
        }
        return row
    }

    func jobRow(_ job: QueuedJob, kind: JobQueueKind) -> [String: Any] {
        var row: [String: Any] = [
            "bundleID": job.bundleID,
            "queue": job.queue,
            "jobID": job.jobID ?? "-",
            "reason": job.reason ?? "-",
            "lastReason": job.lastReason ?? "-",
            "status": job.status.map(String.init) ?? "-",
            "attempts": job.attempts.map(String.init) ?? "-",
            "failedAt": job.failedAt.map(Self.timestamp) ?? "-",
            "publishedAt": job.publishedAt.map(Self.timestamp) ?? "-",
            "token": job.tokenRedacted ?? "-",
            "error": job.error ?? "",
            // The listing read at most 64 KiB of the body (contract §5): only that part is redacted and shown.
            "body": JobInspection.redactingToken(job.body)
                + (job.bodySize.map { " … [cut: the first \(QueueInspector.listedBodyBytes) of \($0) bytes; `dead show` or `retry show` gives it whole]" } ?? ""),
        ]
        // A job without an id cannot be selected for a requeue or purge: no buttons.
        if let jobID = job.jobID, let encoded = jobID.addingPercentEncoding(withAllowedCharacters: .urlPathSegmentAllowed) {
            row["requeuePath"] = "/\(kind.rawValue)/\(encoded)/requeue"
            row["purgePath"] = "/\(kind.rawValue)/\(encoded)/purge"
        }
        return row
    }

    /// A path with the given query items (nil values left out), percent-encoded.
    static func path(_ path: String, _ query: KeyValuePairs<String, String?>) -> String {
        let items = query.compactMap { key, value -> String? in
            guard let value, !value.isEmpty,
                let encoded = value.addingPercentEncoding(withAllowedCharacters: .urlPathSegmentAllowed)
            else { return nil }
            return "\(key)=\(encoded)"
        }
        return items.isEmpty ? path : path + "?" + items.joined(separator: "&")
    }

    /// `RFC3339`'s form, the one `.formatted(.iso8601)` wrote (which went through ICU).
    static func timestamp(_ date: Date) -> String {
        RFC3339.string(from: date)
    }
}

extension CharacterSet {
    /// Unreserved characters only, so an id cannot add path segments or a query.
    static let urlPathSegmentAllowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
}
