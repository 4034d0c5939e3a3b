// The operator tools' logic on the in-memory broker (`InMemoryBroker`, its sessions standing
// for the inspector's connections of their own): listing, filters, paging, requeue, purge and
// depths, with no socket. RabbitMQ's own part (quorum queues handing messages back, acks a
// close overtakes) stays in the broker tests beside this file (`QueueInspectorTests`, ...).
import AMQPClient
import APNSOperations
import APNSTopology
import APNSTopologyNames
import Foundation
import Synchronization
import Testing
import TestSupport

@Suite struct QueueInspectorSeamTests {
    static let bundle = "com.example.seam"
    static let delays: [Duration] = [.seconds(600), .seconds(1200)]
    static var work: String { TopologyNames.workQueue(bundle) }
    static var dead: String { TopologyNames.deadQueue(bundle) }
    static func retry(_ index: Int) -> String { TopologyNames.retryQueue(bundle, delay: delays[index]) }

    /// A broker with the bundle's topology and an inspector on it that never waits.
    static func make(pooledReads: Bool = false) async throws -> (InMemoryBroker, QueueInspector) {
        let broker = InMemoryBroker()
        try await broker.declare(TopologyPlan(bundleIDs: [bundle], retryDelays: delays, queueType: .quorum))
        let inspector = QueueInspector(
            sessions: broker, bundleIDs: [bundle], retryDelays: delays, logger: testLogger(),
            deliveryWait: .seconds(30), handBackWait: .seconds(30), ackSettleWait: .zero, pooledReads: pooledReads)
        return (broker, inspector)
    }

    static func seedDead(_ broker: InMemoryBroker, _ ids: [String], reason: (Int) -> String = { _ in "BadDeviceToken" }) {
        for (index, id) in ids.enumerated() {
            let job = deadJob(id: id, to: dead, reason: reason(index), failedAt: Date())
            broker.enqueue(dead, body: job.body, properties: job.properties)
        }
    }

    /// What RabbitMQ dead-letters when the worker rejects a message over its size limit
    /// unread: its body, RabbitMQ's `x-death`, and no `x-apns-*` header.
    static func tooLargeDeadLetter(_ broker: InMemoryBroker, id: String) -> [UInt8] {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = id
        properties.headers = [
            "x-death": .array([
                .table([
                    "count": .int64(1), "reason": .string("rejected"), "queue": .string(work), "time": .timestamp(Date()),
                    "exchange": .string(""), "routing-keys": .array([.string(work)]),
                ])
            ]),
            "x-first-death-reason": .string("rejected"),
        ]
        let body = [UInt8](repeating: 0x20, count: 70_000)
        broker.enqueue(dead, body: body, properties: properties)
        return body
    }

    /// Nothing taken is left unsettled or held: every session closed, every consumer ended.
    static func expectNothingHeld(_ broker: InMemoryBroker) {
        #expect(broker.unackedCount == 0)
        #expect(broker.openSessionCount == 0)
        #expect(broker.consumerCount == 0)
    }

    @Test func aListingShowsTheJobsInOrderAndLeavesTheQueueAsItWas() async throws {
        let (broker, inspector) = try await Self.make()
        let ids = jobIDs(5)
        Self.seedDead(broker, ids, reason: { $0 % 2 == 0 ? "BadDeviceToken" : "Unregistered" })
        let before = try #require(broker.readyMessages(Self.dead))

        let jobs = try await inspector.list(.dead)
        #expect(jobs.map(\.jobID) == ids)
        #expect(jobs.map(\.position) == Array(0..<5))
        #expect(jobs.allSatisfy { $0.queue == Self.dead && $0.bundleID == Self.bundle && $0.attempts == 3 })
        #expect(jobs[1].reason == "Unregistered" && jobs[0].reason == "BadDeviceToken")
        #expect(jobs[0].tokenRedacted == "0011…ccdd")

        let after = try #require(broker.readyMessages(Self.dead))
        #expect(after.map(\.body) == before.map(\.body))
        #expect(after.map(\.properties) == before.map(\.properties))
        #expect(broker.settled.isEmpty && broker.published.isEmpty)
        Self.expectNothingHeld(broker)
        // One session for the listing, one to see the messages back in their queue.
        #expect(broker.sessionPurposes == ["list", "hand-back"])
    }

    @Test func filtersAndPagesSelectTheRightJobs() async throws {
        let (broker, inspector) = try await Self.make()
        let ids = jobIDs(6)
        Self.seedDead(broker, ids, reason: { $0 < 4 ? "Unregistered" : "BadDeviceToken" })
        for (index, id) in jobIDs(2, "retry").enumerated() {
            var properties = AMQPProperties.persistentJSON
            properties.messageID = id
            properties.headers = [JobHeaders.attempt: .int32(2)]
            broker.enqueue(Self.retry(1 - index), body: jobBody(id), properties: properties)
        }

        let unregistered = try await inspector.list(.dead, filter: JobFilter(reason: "unregistered"))
        #expect(unregistered.map(\.jobID) == Array(ids.prefix(4)))
        // Requests on one session (the admin page's dead and retry jobs): each queue once, since
        // the messages one request holds are not delivered to the next until the session closes.
        let pages = try await inspector.list([
            ListingRequest(kind: .dead, offset: 1, limit: 2),
            ListingRequest(kind: .retry, limit: nil),
        ])
        #expect(pages[0].jobs.map(\.jobID) == [ids[1], ids[2]] && pages[0].more)
        // Retry queues in the order of their delays, whatever order they were filled in.
        #expect(pages[1].jobs.map(\.jobID) == ["retry-00001", "retry-00000"])
        #expect(pages[1].jobs.map(\.queue) == [Self.retry(0), Self.retry(1)])
        let filtered = try await inspector.list([ListingRequest(kind: .dead, filter: JobFilter(reason: "Unregistered"), offset: 2, limit: 5)])
        #expect(filtered[0].jobs.map(\.jobID) == [ids[2], ids[3]] && !filtered[0].more)
        #expect(filtered[0].scanned == 6)
        #expect(try await inspector.show(.dead, jobID: ids[4])?.reason == "BadDeviceToken")
        #expect(try await inspector.show(.dead, jobID: "absent") == nil)
        #expect(try await inspector.readyCount(.dead) == 6)
        #expect(broker.ready(Self.dead)?.count == 6)
        #expect(broker.ready(Self.retry(0))?.count == 1 && broker.ready(Self.retry(1))?.count == 1)
        Self.expectNothingHeld(broker)
    }

    @Test func aRequeueByIDMovesExactlyThatJobToItsWorkQueue() async throws {
        let (broker, inspector) = try await Self.make()
        let ids = jobIDs(5)
        Self.seedDead(broker, ids, reason: { _ in "Unregistered" })
        let original = try #require(broker.readyMessages(Self.dead)?[2])

        let report = try await inspector.requeue(.dead, .jobIDs([ids[2], "absent"]))
        #expect(report == MoveReport(moved: 1, notFound: ["absent"]))

        let moved = try #require(broker.readyMessages(Self.work))
        #expect(moved.count == 1)
        #expect(moved.first?.body == original.body)
        #expect(moved.first?.properties.messageID == ids[2])
        var envelope = JobEnvelope(original.properties.headers)
        envelope.requeue()
        #expect(moved.first?.properties.headers == envelope.amqpHeaders)
        let headers = try #require(moved.first?.properties.headers)
        #expect(headers[JobHeaders.lastReason] == .string("Unregistered"))
        for cleared in JobEnvelope.clearedOnRequeue { #expect(headers[cleared] == nil) }

        #expect(broker.readyMessages(Self.dead)?.map(\.jobID) == [ids[0], ids[1], ids[3], ids[4]])
        #expect(broker.settled.filter { $0.requeue == nil }.map(\.body) == [original.body])
        Self.expectNothingHeld(broker)
    }

    @Test func aMessageTooLargeDeadLetterIsListedWithThatReasonAndRequeued() async throws {
        let (broker, inspector) = try await Self.make()
        Self.seedDead(broker, ["ordinary"])
        let body = Self.tooLargeDeadLetter(broker, id: "too-large")

        let jobs = try await inspector.list(.dead)
        #expect(jobs.map(\.jobID) == ["ordinary", "too-large"])
        #expect(jobs[1].reason == JobEnvelope.messageTooLarge)
        // Listed cut (contract §5), with its size; the requeue below moves it whole.
        #expect(jobs[1].body.utf8.count == QueueInspector.listedBodyBytes && jobs[1].bodySize == body.count)
        #expect(try await inspector.list(.dead, filter: JobFilter(reason: "MessageTooLarge")).map(\.jobID) == ["too-large"])

        let report = try await inspector.requeue(.dead, .all(JobFilter(reason: JobEnvelope.messageTooLarge)))
        #expect(report == MoveReport(moved: 1, notFound: []))
        let moved = try #require(broker.readyMessages(Self.work)?.first)
        #expect(moved.body == body)
        #expect(moved.properties.headers?[JobHeaders.lastReason] == .string(JobEnvelope.messageTooLarge))
        #expect(broker.readyMessages(Self.dead)?.map(\.jobID) == ["ordinary"])
        Self.expectNothingHeld(broker)
    }

    /// Listings held every body whole (101 dead jobs of 1-16 MiB on the admin
    /// page). A listing holds at most 64 KiB of each, says the size of the rest, and redaction
    /// sees only that part; `show` gives the one job whole.
    @Test func listingsHoldAtMost64KiBOfEachBodyAndShowGivesItWhole() async throws {
        let (broker, inspector) = try await Self.make()
        Self.seedDead(broker, ["small"])
        let big = Array(#"{"id":"big","token":"\#(testToken)","payload":{"aps":{"alert":""#.utf8)
            + [UInt8](repeating: 0x61, count: 1 << 20) + Array(#""}},"tail":"\#(testToken)"}"#.utf8)
        var message = deadJob(id: "big", to: Self.dead, reason: "BadDeviceToken", failedAt: Date())
        message.body = big
        broker.enqueue(Self.dead, body: message.body, properties: message.properties)

        let jobs = try await inspector.list(.dead)
        #expect(jobs.map(\.jobID) == ["small", "big"])
        #expect(jobs[0].bodySize == nil && Array(jobs[0].body.utf8) == jobBody("small"))
        #expect(jobs[1].bodySize == big.count)
        #expect(Array(jobs[1].body.utf8) == Array(big.prefix(QueueInspector.listedBodyBytes)))
        let redacted = JobInspection.redactingToken(jobs[1].body)
        #expect(!redacted.contains(testToken) && redacted.utf8.count <= QueueInspector.listedBodyBytes)
        // The CLI's listing reads them the same way.
        var listed: [QueuedJob] = []
        try await inspector.forEachJob(.dead) { listed.append($0) }
        #expect(listed.map(\.bodySize) == [nil, big.count])
        #expect(listed.allSatisfy { $0.body.utf8.count <= QueueInspector.listedBodyBytes })
        let page = try await inspector.list([ListingRequest(kind: .dead, filter: JobFilter(), limit: 10)])[0]
        #expect(page.scannedBytes == jobBody("small").count + QueueInspector.listedBodyBytes)

        let shown = try #require(try await inspector.show(.dead, jobID: "big"))
        #expect(shown.bodySize == nil && Array(shown.body.utf8) == big)
        Self.expectNothingHeld(broker)
    }

    @Test func aPurgeDropsExactlyTheSelectedJobsOrWholeQueues() async throws {
        let (broker, inspector) = try await Self.make()
        let ids = jobIDs(6)
        Self.seedDead(broker, ids, reason: { $0 % 3 == 0 ? "Unregistered" : "BadDeviceToken" })

        let byReason = try await inspector.purge(.dead, .all(JobFilter(reason: "Unregistered")))
        #expect(byReason == PurgeReport(purged: 2, notFound: []))
        #expect(broker.readyMessages(Self.dead)?.map(\.jobID) == [ids[1], ids[2], ids[4], ids[5]])
        let byID = try await inspector.purge(.dead, .jobIDs([ids[4], ids[0]]))
        #expect(byID == PurgeReport(purged: 1, notFound: [ids[0]]))
        #expect(broker.readyMessages(Self.dead)?.map(\.jobID) == [ids[1], ids[2], ids[5]])
        #expect(broker.published.isEmpty)

        let progress = Mutex<[OperationProgress]>([])
        let whole = try await inspector.purge(.dead, .all(JobFilter()), progress: { report in progress.withLock { $0.append(report) } })
        #expect(whole == PurgeReport(purged: 3, notFound: []))
        #expect(progress.withLock { $0.last } == OperationProgress(settled: 3, examined: 3, total: 3))
        #expect(broker.ready(Self.dead) == [])
        Self.expectNothingHeld(broker)
    }

    /// A move never loses a job: the publish to the work queue fails, the source message was
    /// not acked, and closing the session hands it back where it was.
    @Test func aRequeueWhosePublishFailsLeavesEveryJobWhereItWas() async throws {
        let (broker, inspector) = try await Self.make()
        let ids = jobIDs(3)
        Self.seedDead(broker, ids)
        broker.failPublishes = true
        await #expect(throws: AMQPError.self) { try await inspector.requeue(.dead, .all(JobFilter())) }
        #expect(broker.readyMessages(Self.dead)?.map(\.jobID) == ids)
        #expect(broker.ready(Self.work) == [])
        Self.expectNothingHeld(broker)
    }

    /// With a `[registry]`, depths read the registry's and groups' dead queues too
    /// (what /metrics exports as roles `registry_dead` and `groups_dead`); without, not.
    @Test func depthsReadTheRegistryDeadQueuesWhenAsked() async throws {
        let broker = InMemoryBroker()
        var plan = TopologyPlan(bundleIDs: [Self.bundle], retryDelays: Self.delays, queueType: .quorum)
        plan.addRegistry(queueType: .quorum)
        try await broker.declare(plan)
        broker.enqueue(TopologyNames.registryDead, body: Array("not a registration".utf8))
        for _ in 0..<3 { broker.enqueue(TopologyNames.groupsDead, body: Array("{}".utf8)) }
        let asked = QueueInspector(
            sessions: broker, bundleIDs: [Self.bundle], retryDelays: Self.delays, logger: testLogger(), registryQueues: true)
        let depths = try await asked.depths()
        #expect(depths.filter { $0.bundleID == "" }.map(\.role) == ["unrouted", "registry_dead", "groups_dead"])
        #expect(depths.first { $0.role == "registry_dead" }?.messages == 1)
        #expect(depths.first { $0.role == "groups_dead" }?.messages == 3)
        #expect(depths.first { $0.role == "groups_dead" }?.queue == TopologyNames.groupsDead)
        let plain = QueueInspector(sessions: broker, bundleIDs: [Self.bundle], retryDelays: Self.delays, logger: testLogger())
        #expect(try await plain.depths().allSatisfy { !$0.role.hasSuffix("_dead") })
    }

    /// Depths come from passive declares on one pooled session that the admin server closes
    /// when it stops; reads open no session per call.
    @Test func depthsUseOnePooledSession() async throws {
        let (broker, inspector) = try await Self.make(pooledReads: true)
        Self.seedDead(broker, jobIDs(2))
        broker.enqueue(Self.work, body: jobBody("waiting"))

        let depths = try await inspector.depths()
        #expect(depths.first { $0.queue == Self.dead }?.messages == 2)
        #expect(depths.first { $0.queue == Self.work }?.messages == 1)
        #expect(depths.first { $0.queue == Self.retry(0) }?.role == "retry")
        _ = try await inspector.readyCount(.dead)
        #expect(broker.sessionPurposes == ["reads"])
        #expect(broker.openSessionCount == 1)
        await inspector.close()
        #expect(broker.openSessionCount == 0)
    }
}

extension QueueInspectorSeamTests {
    /// Messages another reader holds (another admin server's or the CLI's listing) are not
    /// ready: the depth does not count them and a listing cannot see them. The listing says so
    /// (`heldElsewhere`), so that the page says they could not be read instead of "none".
    @Test func aListingBesideAnotherReaderSaysTheQueueIsHeldElsewhere() async throws {
        let (broker, inspector) = try await Self.make()
        Self.seedDead(broker, (0..<5).map { "held-\($0)" })
        let other = try await broker.consume(queue: Self.dead, prefetch: 10)
        var iterator = other.makeAsyncIterator()
        for _ in 0..<5 { _ = try await iterator.next() }
        let listing = try await inspector.list([ListingRequest(kind: .dead, filter: JobFilter(bundleID: Self.bundle), limit: 100)])[0]
        #expect(listing.jobs.isEmpty && listing.heldElsewhere)
        await other.cancel()
    }
}
