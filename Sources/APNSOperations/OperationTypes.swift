/// The values the operator tools (CLI and admin HTTP) exchange with `QueueInspector`: which
/// queues, which jobs, and what a listing, requeue or purge found.
import Foundation

/// The two kinds of queue an operator inspects: a bundle's dead queue, or all its retry queues.
public enum JobQueueKind: String, Sendable, Codable, CaseIterable {
    case dead
    case retry
}

/// Which jobs a listing, requeue or purge is about. Every criterion given must hold.
public struct JobFilter: Sendable, Hashable {
    /// Only this bundle's queues (it need not be configured: its queues are looked up by name).
    public var bundleID: String?
    /// `x-apns-reason` equals this (case-insensitive). Retry jobs carry no reason unless they
    /// were requeued before, so a reason filter on retry queues matches `x-apns-last-reason`.
    public var reason: String?
    /// Failed (or, without `x-apns-failed-at`, was published) at least this long ago.
    public var olderThan: Duration?
    /// Failed (or was published) at most this long ago.
    public var newerThan: Duration?

    public init(bundleID: String? = nil, reason: String? = nil, olderThan: Duration? = nil, newerThan: Duration? = nil) {
        self.bundleID = bundleID
        self.reason = reason
        self.olderThan = olderThan
        self.newerThan = newerThan
    }

    /// True when only the bundle is restricted: every message of the queues in scope is selected,
    /// so a purge may drop whole queues and a listing may stop after `limit` messages.
    public var selectsWholeQueues: Bool { reason == nil && olderThan == nil && newerThan == nil }
}

/// One message as it sits in a dead or retry queue, decoded for people and scripts.
public struct QueuedJob: Sendable, Codable, Hashable {
    public var queue: String
    public var bundleID: String
    /// 0-based position in its queue at listing time.
    public var position: Int
    /// The job's id: the body's `id`, else the AMQP `message_id`.
    public var jobID: String?
    /// `x-apns-reason`.
    public var reason: String?
    /// `x-apns-status`.
    public var status: Int?
    /// `x-apns-attempts` on dead jobs, `x-apns-attempt` on retry jobs.
    public var attempts: Int?
    /// `x-apns-failed-at`.
    public var failedAt: Date?
    /// The AMQP `timestamp` property (set by publishers such as `apns-worker publish`).
    public var publishedAt: Date?
    /// `x-apns-error`.
    public var error: String?
    /// `x-apns-last-reason`: the reason it had when an operator last requeued it.
    public var lastReason: String?
    /// Every header, rendered as text.
    public var headers: [String: String]
    /// The body as UTF-8 (invalid bytes replaced), otherwise unchanged.
    public var body: String
    /// The device token's first and last four hex digits; never the full token.
    public var tokenRedacted: String?
    /// Set when `body` is cut (contract §5: a listing reads and holds at most
    /// `QueueInspector.listedBodyBytes` of each body): the whole body's size in bytes.
    public var bodySize: Int?

    public init(
        queue: String, bundleID: String, position: Int, jobID: String?, reason: String?, status: Int?,
        attempts: Int?, failedAt: Date?, publishedAt: Date?, error: String?, lastReason: String?,
        headers: [String: String], body: String, tokenRedacted: String?, bodySize: Int? = nil
    ) {
        self.queue = queue
        self.bundleID = bundleID
        self.position = position
        self.jobID = jobID
        self.reason = reason
        self.status = status
        self.attempts = attempts
        self.failedAt = failedAt
        self.publishedAt = publishedAt
        self.error = error
        self.lastReason = lastReason
        self.headers = headers
        self.body = body
        self.tokenRedacted = tokenRedacted
        self.bodySize = bodySize
    }

    /// When the job last failed, else when it was published: what age filters measure.
    public var referenceDate: Date? { failedAt ?? publishedAt }
}

/// Ready messages and consumers of one queue.
public struct QueueDepth: Sendable, Codable, Hashable {
    public var queue: String
    /// Empty for the shared `apns.unrouted` queue.
    public var bundleID: String
    /// `work`, `retry`, `dead` or `unrouted`; `registry_dead` or `groups_dead` for the device
    /// registry's dead queues.
    public var role: String
    public var messages: Int
    public var consumers: Int

    public init(queue: String, bundleID: String, role: String, messages: Int, consumers: Int) {
        self.queue = queue
        self.bundleID = bundleID
        self.role = role
        self.messages = messages
        self.consumers = consumers
    }
}

/// The jobs a requeue or purge acts on.
public enum JobSelection: Sendable, Hashable {
    /// These job ids. The search stops once every id was found, so of a job that at-least-once
    /// delivery duplicated, the first copy in queue order is taken and later copies stay.
    case jobIDs([String])
    /// Every job the filter matches.
    case all(JobFilter)
}

/// What a requeue did.
public struct MoveReport: Sendable, Codable, Hashable {
    /// Messages published to their work queue (confirmed) and then acked in their source queue.
    public var moved: Int
    /// Job ids asked for by id that were in none of the queues searched.
    public var notFound: [String]
    /// Of those moved, the jobs whose header table the worker had dropped for size when they
    /// died (`JobInspection.headersWereDropped`): requeued without the headers they came with.
    /// Their job ids (`-` for a job without one).
    public var withoutTheirHeaders: [String]

    public init(moved: Int, notFound: [String], withoutTheirHeaders: [String] = []) {
        self.moved = moved
        self.notFound = notFound
        self.withoutTheirHeaders = withoutTheirHeaders
    }
}

public struct PurgeReport: Sendable, Codable, Hashable {
    /// Messages acked (dropped) in their queues.
    public var purged: Int
    /// Job ids asked for by id that were in none of the queues searched.
    public var notFound: [String]

    public init(purged: Int, notFound: [String]) {
        self.purged = purged
        self.notFound = notFound
    }
}

/// One listing the operator tools ask for: which jobs, from which match on, how many at most.
public struct ListingRequest: Sendable, Hashable {
    public var kind: JobQueueKind
    public var filter: JobFilter
    /// Matching jobs to skip before the page starts.
    public var offset: Int
    /// The page's size; nil lists every match (the CLI's `forEachJob` is the way for big queues).
    public var limit: Int?
    /// Messages read at most to answer (a filter may have to look far for a page); nil: no
    /// bound beyond `QueueInspector.maximumMessagesPerQueue` per queue.
    public var scanLimit: Int?

    public init(kind: JobQueueKind, filter: JobFilter = JobFilter(), offset: Int = 0, limit: Int?, scanLimit: Int? = nil) {
        self.kind = kind
        self.filter = filter
        self.offset = max(0, offset)
        self.limit = limit.map { max(0, $0) }
        self.scanLimit = scanLimit.map { max(1, $0) }
    }
}

/// One page of a listing, and what answering it cost.
public struct JobListing: Sendable, Codable, Hashable {
    public var jobs: [QueuedJob] = []
    /// Matching jobs skipped before the page.
    public var offset: Int
    /// More matching jobs follow the page.
    public var more = false
    /// Messages read from the broker (and handed back) to answer, and their bodies' bytes: what
    /// a listing costs does not depend on the queue's depth beyond the page, unless a filter
    /// has to look further.
    public var scanned = 0
    public var scannedBytes = 0
    /// The scan limit stopped the listing before every message in scope was looked at: matches
    /// may exist beyond it (narrow the filter, e.g. by bundle).
    public var scanLimited = false
    /// Messages the queues reported ready that did not arrive within the inspector's
    /// `deliveryWait` (another reader holds them, or they expired): the listing is not the
    /// queues' whole content, and a listing of nothing with `unread > 0` is not "no jobs".
    public var unread = 0
    /// Another reader consumed a queue in scope when this listing read it (another admin server
    /// or the CLI listing it): the messages it holds are not ready, so neither counted nor listed.
    public var heldElsewhere = false

    public init(offset: Int) {
        self.offset = offset
    }
}
