/// Reads and moves the jobs in dead and retry queues for operators (the CLI and the admin
/// HTTP server): listing without consuming or reordering, requeueing to the work queue without
/// ever losing a job, and purging.
import AMQPClient
import APNSConfig
import APNSModel
import APNSTopologyNames
import Foundation
import Logging
import Synchronization

/// Operator access to a bundle's dead and retry queues.
///
/// RabbitMQ has no peek. A listing takes the messages on a connection of its own with a
/// consumer (manual acks, prefetch = the queue's depth), never acks them, and closes the
/// connection, which hands them all back to the broker in their order (measured on quorum and
/// classic queues, see docs/decisions.md). While a listing holds them, other listings see
/// fewer messages and retry messages cannot expire; both last as long as the listing.
///
/// A move is a confirmed publish to the work queue, then the ack of the source message: an
/// interruption between the two leaves the job in both queues (at-least-once), never in none.
/// Listings and moves open a connection of their own and close it before returning; depths and
/// the hand-back checks do too, unless `pooledReads` gives them one long-lived connection (the
/// admin server).
///
/// The broker is reached through `BrokerSessionOpening` (a "connection of its own" is a
/// session, whose close hands back what it did not settle): `AMQPSessions` in production, the
/// in-memory broker in the unit tests. It is held as an existential, off any job's path, so
/// that the admin server and the CLI keep one non-generic inspector type.
public final class QueueInspector: Sendable {
    public let sessions: any BrokerSessionOpening
    public let bundleIDs: [String]
    public let retryDelays: [Duration]
    /// How long to wait for the next message of a queue that reported more ready messages
    /// (another client may have taken them meanwhile).
    public let deliveryWait: Duration
    /// How long an operation waits, before returning, for the messages it held to be ready in
    /// their queues again (see `waitForHandBack`).
    public let handBackWait: Duration
    /// How long an operation that acked messages keeps its connection open before closing it,
    /// so that the acks reach their queues first (quorum queues, see `AckedMessages`). Tests
    /// set 0 to provoke what it guards against.
    public let ackSettleWait: Duration
    /// When set (the admin server), depths and hand-back checks use this one long-lived
    /// connection instead of one each; listings and moves always take a connection of their
    /// own, because closing it is what hands the messages back in their order.
    let reads: PooledSession?
    /// Operations that take messages run one at a time (`takingTurn`).
    let turns = OperationTurns()
    let logger: Logger
    /// Whether `depths()` reads the device registry's dead queues too (`apns.registry.dead`,
    /// `apns.groups.dead`): set when the worker runs a `[registry]`, so that their depths reach
    /// /metrics (role `registry_dead`, `groups_dead`, bundle ""); nothing else reads them.
    public let registryQueues: Bool

    /// The most messages one consumer can hold unacked (AMQP prefetch is 16 bits): a listing
    /// sees at most this many messages of each queue.
    public static let maximumMessagesPerQueue = Int(UInt16.max)
    /// Contract §5: the most of each body a listing reads and holds. A longer body is cut as it
    /// arrives (`QueuedJob.bodySize` gives its size), so a dead queue of large messages costs a
    /// listing no more than one of small ones; `show` reads the whole of the one job it finds.
    public static let listedBodyBytes = 64 << 10
    /// Confirmed publishes in flight at once while moving jobs.
    static let movesInFlight = 256

    /// An inspector on RabbitMQ: a connection per session, named after `amqp`'s.
    public convenience init(
        amqp: AMQPConfiguration, bundleIDs: [String], retryDelays: [Duration], logger: Logger,
        deliveryWait: Duration = .seconds(3), handBackWait: Duration = .seconds(5), ackSettleWait: Duration = .milliseconds(500),
        pooledReads: Bool = false, registryQueues: Bool = false
    ) {
        self.init(
            sessions: AMQPSessions(configuration: amqp, logger: logger), bundleIDs: bundleIDs, retryDelays: retryDelays,
            logger: logger, deliveryWait: deliveryWait, handBackWait: handBackWait, ackSettleWait: ackSettleWait,
            pooledReads: pooledReads, registryQueues: registryQueues)
    }

    public init(
        sessions: any BrokerSessionOpening, bundleIDs: [String], retryDelays: [Duration], logger: Logger,
        deliveryWait: Duration = .seconds(3), handBackWait: Duration = .seconds(5), ackSettleWait: Duration = .milliseconds(500),
        pooledReads: Bool = false, registryQueues: Bool = false
    ) {
        self.registryQueues = registryQueues
        self.ackSettleWait = ackSettleWait
        self.reads = pooledReads ? PooledSession(sessions: sessions) : nil
        self.sessions = sessions
        self.bundleIDs = bundleIDs
        self.retryDelays = retryDelays
        self.logger = logger
        self.deliveryWait = deliveryWait
        self.handBackWait = handBackWait
    }

    /// The broker, bundles and retry delays of a worker configuration.
    public convenience init(configuration: WorkerConfiguration, connectionName: String, logger: Logger, pooledReads: Bool = false) throws {
        var amqp = try AMQPConfiguration(urlStrings: configuration.amqp.urls, connectionName: connectionName)
        amqp.heartbeat = configuration.amqp.heartbeat
        if let caFile = configuration.amqp.caFile { amqp.tls.caFile = caFile }
        self.init(
            amqp: amqp, bundleIDs: configuration.bundles.map(\.bundleID), retryDelays: configuration.retry.delays, logger: logger,
            pooledReads: pooledReads, registryQueues: configuration.registry != nil)
    }

    // MARK: - Reading

    /// Ready messages and consumers of every configured queue: per bundle its work queue, retry
    /// queues and dead queue, then `apns.unrouted`, then (with `registryQueues`) the registry's
    /// and groups' dead queues. Queues that do not exist are left out.
    public func depths() async throws -> [QueueDepth] {
        try await withReadConnection("depths") { connection in
            var depths: [QueueDepth] = []
            for bundle in bundleIDs {
                var queues = [(TopologyNames.workQueue(bundle), "work")]
                queues += JobInspection.queues(.retry, bundleID: bundle, retryDelays: retryDelays).map { ($0, "retry") }
                queues.append((TopologyNames.deadQueue(bundle), "dead"))
                for (queue, role) in queues {
                    guard let info = try await inspect(connection, queue) else { continue }
                    depths.append(QueueDepth(
                        queue: queue, bundleID: bundle, role: role,
                        messages: Int(info.messageCount), consumers: Int(info.consumerCount)))
                }
            }
            if let info = try await inspect(connection, TopologyNames.unrouted) {
                depths.append(QueueDepth(
                    queue: TopologyNames.unrouted, bundleID: "", role: "unrouted",
                    messages: Int(info.messageCount), consumers: Int(info.consumerCount)))
            }
            guard registryQueues else { return depths }
            for (queue, role) in Self.registryDeadQueues {
                guard let info = try await inspect(connection, queue) else { continue }
                depths.append(QueueDepth(
                    queue: queue, bundleID: "", role: role, messages: Int(info.messageCount), consumers: Int(info.consumerCount)))
            }
            return depths
        }
    }

    /// The device registry's dead queues and their roles in `QueueDepth` (contract §6).
    public static let registryDeadQueues = [(TopologyNames.registryDead, "registry_dead"), (TopologyNames.groupsDead, "groups_dead")]

    /// The jobs of `kind` that `filter` selects, by bundle (configuration order), queue (retry
    /// delays in order) and position; at most `limit`. Nothing is consumed or reordered.
    public func list(_ kind: JobQueueKind, filter: JobFilter = JobFilter(), limit: Int? = nil) async throws -> [QueuedJob] {
        try await list([ListingRequest(kind: kind, filter: filter, limit: limit)])[0].jobs
    }

    /// Several listings on one connection (the admin page shows dead and retry jobs at once):
    /// one page per request, in order. Only the page's jobs are kept: the messages before it
    /// and the ones the filter rejects are read and dropped (`scan`), so memory follows the
    /// page, not the queue.
    public func list(_ requests: [ListingRequest]) async throws -> [JobListing] {
        try await takingTurn { try await listNow(requests) }
    }

    private func listNow(_ requests: [ListingRequest]) async throws -> [JobListing] {
        let now = Date()
        var readyBefore: [String: Int] = [:]
        let answers = try await withConnection("list") { connection in
            var answers: [JobListing] = []
            for request in requests {
                var listing = JobListing(offset: request.offset)
                let end = request.limit.map { request.offset + $0 }
                var matched = 0
                for (bundle, queue) in scope(request.kind, bundleID: request.filter.bundleID) {
                    // Without criteria beyond the bundle, the messages up to the page's end (and
                    // one more, to tell whether a next page exists) are the answer. A filter has
                    // to look further, within the request's scan limit.
                    var cap = request.filter.selectsWholeQueues ? end.map { $0 + 1 - matched } : nil
                    if let scanLimit = request.scanLimit {
                        guard listing.scanned < scanLimit else {
                            listing.scanLimited = true
                            break
                        }
                        cap = min(cap ?? .max, scanLimit - listing.scanned)
                    }
                    let scannedBefore = listing.scanned
                    let count = try await scan(connection, queue, cap: cap, cutBodies: true) { delivery, position in
                        listing.scanned += 1
                        listing.scannedBytes += delivery.message.body.count
                        let job = JobInspection.queuedJob(delivery.message, queue: queue, bundleID: bundle, position: position)
                        guard JobInspection.matches(job, request.filter, now: now) else { return true }
                        matched += 1
                        if let end, matched > end {
                            listing.more = true
                            return false
                        }
                        if matched > request.offset { listing.jobs.append(job) }
                        return true
                    }
                    readyBefore[queue] = count.ready
                    listing.unread += count.missing
                    listing.heldElsewhere = listing.heldElsewhere || count.heldElsewhere
                    if listing.more { break }
                    if let scanLimit = request.scanLimit, listing.scanned >= scanLimit,
                        let depth = readyBefore[queue], listing.scanned - scannedBefore < min(depth, Self.maximumMessagesPerQueue)
                    {
                        listing.scanLimited = true
                        break
                    }
                }
                answers.append(listing)
            }
            // Closing the connection (withConnection) hands every message back, unacked.
            return answers
        }
        await waitForHandBack(readyBefore)
        return answers
    }

    /// Every job of `kind` that `filter` selects, in listing order, handed to `body` one by one
    /// and not kept (the CLI prints a queue of any size this way); returns how many.
    @discardableResult
    public func forEachJob(
        _ kind: JobQueueKind, filter: JobFilter = JobFilter(), offset: Int = 0, limit: Int? = nil, _ body: (QueuedJob) -> Void
    ) async throws -> Int {
        try await takingTurn { try await forEachJobNow(kind, filter: filter, offset: offset, limit: limit, body) }
    }

    private func forEachJobNow(
        _ kind: JobQueueKind, filter: JobFilter, offset: Int, limit: Int?, _ body: (QueuedJob) -> Void
    ) async throws -> Int {
        let now = Date()
        var readyBefore: [String: Int] = [:]
        let count = try await withConnection("list") { connection in
            var matched = 0
            var given = 0
            for (bundle, queue) in scope(kind, bundleID: filter.bundleID) {
                if let limit, given >= limit { break }
                readyBefore[queue] = try await scan(connection, queue, cap: nil, cutBodies: true) { delivery, position in
                    let job = JobInspection.queuedJob(delivery.message, queue: queue, bundleID: bundle, position: position)
                    guard JobInspection.matches(job, filter, now: now) else { return true }
                    matched += 1
                    guard matched > offset else { return true }
                    body(job)
                    given += 1
                    return limit.map { given < $0 } ?? true
                }.ready
            }
            return given
        }
        await waitForHandBack(readyBefore)
        return count
    }

    /// Ready messages in the queues of `kind` (one bundle's, or every configured bundle's), from
    /// their depths (passive declare): no message is read.
    public func readyCount(_ kind: JobQueueKind, bundleID: String? = nil) async throws -> Int {
        try await withReadConnection("count") { connection in
            var count = 0
            for (_, queue) in scope(kind, bundleID: bundleID) {
                count += Int(try await inspect(connection, queue)?.messageCount ?? 0)
            }
            return count
        }
    }

    /// The first job with this id in the queues of `kind` (of one bundle, or all), or nil; only
    /// the first `scanLimit` messages are looked at when it is given.
    public func show(_ kind: JobQueueKind, jobID: String, bundleID: String? = nil, scanLimit: Int? = nil) async throws -> QueuedJob? {
        try await takingTurn { try await showNow(kind, jobID: jobID, bundleID: bundleID, scanLimit: scanLimit) }
    }

    private func showNow(_ kind: JobQueueKind, jobID: String, bundleID: String?, scanLimit: Int?) async throws -> QueuedJob? {
        var readyBefore: [String: Int] = [:]
        let job = try await withConnection("show") { connection -> QueuedJob? in
            var found: QueuedJob?
            var scanned = 0
            for (bundle, queue) in scope(kind, bundleID: bundleID) {
                if let scanLimit, scanned >= scanLimit { break }
                readyBefore[queue] = try await scan(connection, queue, cap: scanLimit.map { $0 - scanned }, cutBodies: false) { delivery, position in
                    scanned += 1
                    let job = JobInspection.queuedJob(delivery.message, queue: queue, bundleID: bundle, position: position)
                    guard job.jobID == jobID else { return true }
                    found = job
                    return false
                }.ready
                if found != nil { break }
            }
            return found
        }
        await waitForHandBack(readyBefore)
        return job
    }

    // MARK: - Moving and dropping

    /// Moves the selected jobs to their bundle's work queue: attempts reset, failure headers
    /// dropped, the reason kept in `x-apns-last-reason` (`JobInspection.requeueMessage`). Each
    /// job is published with a broker confirm and only then acked where it was.
    /// `progress` hears how far it has got as it goes.
    public func requeue(
        _ kind: JobQueueKind, _ selection: JobSelection, progress: OperationProgressHandler? = nil
    ) async throws -> MoveReport {
        let headerless = Mutex<[String]>([])
        let logger = self.logger
        let (count, notFound) = try await settleSelected(kind, selection, purpose: "requeue", progress: progress) { connection, delivery, bundle in
            try await connection.publish(JobInspection.requeueMessage(delivery.message, bundleID: bundle))
            if JobInspection.headersWereDropped(delivery.message) {
                let id = delivery.message.properties.messageID.map { AMQPShortString.logSafe($0) } ?? "-"
                headerless.withLock { $0.append(id) }
                logger.warning(
                    "requeued a job whose headers were dropped for size when it died; it goes back without them",
                    metadata: ["job.id": "\(id)", "apns.bundle": "\(bundle)"])
            }
        }
        let withoutTheirHeaders = headerless.withLock { $0 }
        logger.info(
            "requeued jobs to their work queues",
            metadata: [
                "operations.kind": "\(kind.rawValue)", "operations.moved": "\(count)", "operations.not_found": "\(notFound.count)",
                "operations.without_headers": "\(withoutTheirHeaders.count)",
            ])
        return MoveReport(moved: count, notFound: notFound, withoutTheirHeaders: withoutTheirHeaders)
    }

    /// Drops the selected jobs; reports how many, and the ids asked for that were not found.
    /// `.all` without criteria beyond the bundle purges whole queues; otherwise exactly the
    /// selected messages are acked.
    /// `progress` hears how far it has got as it goes (after each queue for whole queues).
    public func purge(_ kind: JobQueueKind, _ selection: JobSelection, progress: OperationProgressHandler? = nil) async throws -> PurgeReport {
        if case .all(let filter) = selection, filter.selectsWholeQueues {
            let purged = try await takingTurn { try await withConnection("purge") { connection in
                let queues = scope(kind, bundleID: filter.bundleID).map(\.1)
                let total = progress == nil ? 0 : try await readyMessages(connection, queues)
                var purged = 0
                for queue in queues {
                    guard try await inspect(connection, queue) != nil else { continue }
                    purged += Int(try await connection.purgeQueue(queue))
                    progress?(OperationProgress(settled: purged, examined: purged, total: total))
                }
                return purged
            } }
            logger.info("purged queues", metadata: ["operations.kind": "\(kind.rawValue)", "operations.purged": "\(purged)"])
            return PurgeReport(purged: purged, notFound: [])
        }
        let (count, notFound) = try await settleSelected(kind, selection, purpose: "purge", progress: progress) { _, _, _ in }
        logger.info(
            "purged jobs",
            metadata: ["operations.kind": "\(kind.rawValue)", "operations.purged": "\(count)", "operations.not_found": "\(notFound.count)"])
        return PurgeReport(purged: count, notFound: notFound)
    }

    // MARK: - Plumbing

    /// Takes the messages of every queue in scope, runs `beforeAck` on each selected one and
    /// acks it once that succeeded; the others are handed back unacked when the connection
    /// closes. By id, stops as soon as every id was found.
    private func settleSelected(
        _ kind: JobQueueKind, _ selection: JobSelection, purpose: String, progress: OperationProgressHandler?,
        beforeAck: @escaping @Sendable (any BrokerSession, AMQPDelivery, String) async throws -> Void
    ) async throws -> (count: Int, notFound: [String]) {
        try await takingTurn { try await settleSelectedNow(kind, selection, purpose: purpose, progress: progress, beforeAck: beforeAck) }
    }

    private func settleSelectedNow(
        _ kind: JobQueueKind, _ selection: JobSelection, purpose: String, progress: OperationProgressHandler?,
        beforeAck: @escaping @Sendable (any BrokerSession, AMQPDelivery, String) async throws -> Void
    ) async throws -> (count: Int, notFound: [String]) {
        let now = Date()
        var wanted: Set<String> = []
        var bundleID: String?
        switch selection {
        case .jobIDs(let ids): wanted = Set(ids)
        case .all(let filter): bundleID = filter.bundleID
        }
        var found: Set<String> = []
        var count = 0
        var readyAfter: [String: Int] = [:]
        var acked = AckedMessages()
        var examined = 0
        try await withConnection(purpose) { connection in
            let queues = scope(kind, bundleID: bundleID)
            let total = progress == nil ? 0 : try await readyMessages(connection, queues.map(\.1))
            for (bundle, queue) in queues {
                if !wanted.isEmpty, wanted.isSubset(of: found) { break }
                guard let info = try await inspect(connection, queue) else { continue }
                let depth = min(Int(info.messageCount), Self.maximumMessagesPerQueue)
                guard depth > 0 else { continue }
                let settledBefore = count
                let nextDelivery = try await consume(connection, queue, prefetch: UInt16(depth))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    var inFlight = 0
                    var seen = 0
                    while seen < depth, let delivery = try await nextDelivery() {
                        let job = JobInspection.queuedJob(delivery.message, queue: queue, bundleID: bundle, position: seen)
                        seen += 1
                        examined += 1
                        // Counted as settled once handed to the task group (at most movesInFlight ahead).
                        defer { progress?(OperationProgress(settled: count, examined: examined, total: total)) }
                        guard JobInspection.selects(selection, job, now: now) else { continue }
                        if let id = job.jobID { found.insert(id) }
                        acked.acked(delivery.message, in: queue)
                        if inFlight >= Self.movesInFlight {
                            try await group.next()
                            inFlight -= 1
                        }
                        group.addTask {
                            try await beforeAck(connection, delivery, bundle)
                            if await connection.ack(delivery) == .stale {
                                throw AMQPError(.connectionLost, "the channel of queue '\(queue)' closed before a job was acked; it stays there too")
                            }
                        }
                        inFlight += 1
                        count += 1
                        if !wanted.isEmpty, wanted.isSubset(of: found) { break }
                    }
                    try await group.waitForAll()
                }
                readyAfter[queue] = Int(info.messageCount) - (count - settledBefore)
            }
            // On quorum queues an ack sent just before its channel closes can be overtaken by the
            // close, and the job comes back (contract §4): let the last acks reach the broker.
            try? await Task.sleep(for: ackSettleWait)
        }
        await waitForHandBack(readyAfter)
        await ackAgainWhatCameBack(acked, purpose: purpose)
        let notFound = wanted.subtracting(found).sorted()
        return (count, notFound)
    }

    /// Visits up to `cap` (default: all ready, at most `maximumMessagesPerQueue`) messages of
    /// `queue` in order without acking them; they stay with this connection until it closes.
    /// `visit` gets each with its position and returns false to stop. Returns how many were
    /// ready before. A queue that does not exist has none.
    ///
    /// One consumer with prefetch = the messages wanted: RabbitMQ sends a consumer no more
    /// unacked messages than its prefetch, so the cap bounds what crosses the network. (Several
    /// consumers in windows would bound it further, but their channels' closes may put the
    /// messages back out of order; see docs/decisions.md.) With `cutBodies` each body is cut to
    /// `listedBodyBytes` as it arrives.
    func scan(
        _ connection: any BrokerSession, _ queue: String, cap: Int?, cutBodies: Bool, _ visit: (AMQPDelivery, Int) throws -> Bool
    ) async throws -> ScanCount {
        guard let info = try await inspect(connection, queue) else { return ScanCount(ready: 0, missing: 0, heldElsewhere: false) }
        // Nobody consumes dead and retry queues but operators' reads: a consumer there is another
        // listing (another admin server, the CLI), holding messages the depth does not count.
        let heldElsewhere = info.consumerCount > 0
        var want = min(Int(info.messageCount), Self.maximumMessagesPerQueue)
        if let cap { want = min(want, max(0, cap)) }
        guard want > 0 else { return ScanCount(ready: Int(info.messageCount), missing: 0, heldElsewhere: heldElsewhere) }
        let nextDelivery = try await consume(connection, queue, prefetch: UInt16(want), cutBodies: cutBodies)
        var seen = 0
        var stopped = false
        while seen < want, let delivery = try await nextDelivery() {
            seen += 1
            guard try visit(delivery, seen - 1) else {
                stopped = true
                break
            }
        }
        let missing = stopped ? 0 : want - seen
        if missing > 0 {
            logger.debug(
                "fewer messages than the queue reported",
                metadata: ["amqp.queue": "\(queue)", "operations.expected": "\(want)", "operations.taken": "\(seen)"])
        }
        return ScanCount(ready: Int(info.messageCount), missing: missing, heldElsewhere: heldElsewhere)
    }

    /// What `scan` found: the messages ready before it, how many of those it wanted did not
    /// arrive within `deliveryWait` (another reader holds them, or they expired), and whether
    /// another reader consumed the queue when it started.
    struct ScanCount {
        var ready: Int
        var missing: Int
        var heldElsewhere: Bool
    }

    /// Waits (at most `handBackWait`) until every queue has at least `ready` messages ready again. The
    /// broker requeues a closed connection's unacked messages after the close returns (quorum
    /// queues through their log), so without this an operation started right after another
    /// could miss the messages still on their way back. Only operators take from dead and retry
    /// queues, and new failures only add messages, so the count comes back at least this high.
    func waitForHandBack(_ ready: [String: Int]) async {
        let pending = ready.filter { $0.value > 0 }
        guard !pending.isEmpty else { return }
        let deadline = ContinuousClock.now + handBackWait
        do {
            try await withReadConnection("hand-back") { connection in
                for (queue, expected) in pending {
                    while let info = try await inspect(connection, queue), Int(info.messageCount) < expected {
                        guard ContinuousClock.now < deadline else {
                            logger.warning(
                                "messages not yet back in their queue",
                                metadata: ["amqp.queue": "\(queue)", "operations.expected": "\(expected)", "operations.ready": "\(info.messageCount)"])
                            return
                        }
                        try await Task.sleep(for: .milliseconds(20))
                    }
                }
            }
        } catch {
            logger.warning("could not check that messages are back in their queues", metadata: ["error": "\(error)"])
        }
    }

    /// Consumes `queue` (manual acks; whole bodies, as an operator reads even the messages too
    /// large for the worker, or with `cutBodies` each cut to `listedBodyBytes`) and returns its
    /// next delivery, one per call.
    private func consume<Session: BrokerSession>(
        _ session: Session, _ queue: String, prefetch: UInt16, cutBodies: Bool = false
    ) async throws -> @Sendable () async throws -> AMQPDelivery? {
        let consumer =
            cutBodies
            ? try await session.consume(queue: queue, prefetch: prefetch, cuttingBodiesAt: Self.listedBodyBytes)
            : try await session.consume(queue: queue, prefetch: prefetch, maxBodySize: .max)
        let iterator = consumer.makeAsyncIterator()
        let wait = deliveryWait
        return { try await Self.nextDelivery(iterator, within: wait) }
    }

    /// The next delivery, or nil when none arrives within `wait`. A delivery that arrives just
    /// as the wait ends stays unsettled with the session and goes back when it closes.
    private static func nextDelivery<Iterator: AsyncIteratorProtocol & Sendable>(
        _ iterator: Iterator, within wait: Duration
    ) async throws -> AMQPDelivery? where Iterator.Element == AMQPDelivery {
        try await withThrowingTaskGroup(of: AMQPDelivery?.self) { group in
            group.addTask {
                var iterator = iterator
                return try await iterator.next()
            }
            group.addTask {
                try await Task.sleep(for: wait)
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }

    /// The messages ready in `queues` (those that exist), for a progress total.
    private func readyMessages(_ connection: any BrokerSession, _ queues: [String]) async throws -> Int {
        var total = 0
        for queue in queues {
            total += Int(try await inspect(connection, queue)?.messageCount ?? 0)
        }
        return total
    }

    /// Passive declare; nil when the queue does not exist.
    private func inspect(_ connection: any BrokerSession, _ queue: String) async throws -> AMQPQueueInfo? {
        do {
            return try await connection.inspectQueue(queue)
        } catch let error as AMQPError where error.replyCode == 404 {
            return nil
        }
    }

    /// (bundle, queue) pairs of `kind`: one bundle's, or every configured bundle's. A bundle
    /// filter (an admin query, `--bundle`) can make a queue name longer than AMQP allows: no
    /// queue has it, so it holds no job and is left out. Sent, the client would refuse it
    /// (`invalidName`) and the request would fail as if the broker were unreachable (503).
    private func scope(_ kind: JobQueueKind, bundleID: String?) -> [(String, String)] {
        let bundles = bundleID.map { [$0] } ?? bundleIDs
        return bundles.flatMap { bundle in
            JobInspection.queues(kind, bundleID: bundle, retryDelays: retryDelays).filter(AMQPShortString.fits).map { (bundle, $0) }
        }
    }

    /// Runs an operation that takes messages when no other one of this inspector does (`OperationTurns`).
    func takingTurn<Result: Sendable>(_ body: () async throws -> Result) async throws -> Result {
        await turns.take()
        do {
            let result = try await body()
            await turns.give()
            return result
        } catch {
            await turns.give()
            throw error
        }
    }

    /// The pooled read connection when there is one, else a connection of its own.
    func withReadConnection<Result: Sendable>(_ purpose: String, _ body: (any BrokerSession) async throws -> Result) async throws -> Result {
        guard let reads else { return try await withConnection(purpose, body) }
        return try await body(try await reads.get())
    }

    /// Runs `body` in a session of its own, closed afterwards (also when `body` throws): the
    /// close hands back every message it took and did not settle.
    func withConnection<Result: Sendable>(
        _ purpose: String, isolation: isolated (any Actor)? = #isolation, _ body: (any BrokerSession) async throws -> Result
    ) async throws -> Result {
        let session: any BrokerSession = try await sessions.open(purpose)
        do {
            let result = try await body(session)
            await session.close()
            return result
        } catch {
            await session.close()
            throw error
        }
    }

    /// Closes the pooled read connection, if there is one (the admin server, when it stops).
    public func close() async {
        await reads?.close()
    }
}
