// QueueInspector against the real broker: listing leaves order and count alone on quorum and
// classic queues, filters, show, requeue and purge by id and all, and depths.
import AMQPClient
import APNSOperations
import APNSTopologyNames
import Foundation
import Synchronization
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable), .serialized)
struct QueueInspectorTests {
    @Test(arguments: [QueueType.quorum, .classic])
    func listingTwiceKeepsOrderAndCount(_ type: QueueType) async throws {
        let bundle = try await TestBundle.make(type)
        let ids = jobIDs(500)
        try await bundle.seedDead(ids, reason: { $0 % 3 == 0 ? "Unregistered" : "BadDeviceToken" })
        let inspector = try bundle.inspector()

        let first = try await inspector.list(.dead)
        let second = try await inspector.list(.dead)
        #expect(first.map(\.jobID) == ids)
        #expect(first.map(\.position) == Array(0..<500))
        // Quorum queues count each hand-back in x-delivery-count (see docs/decisions.md); the
        // jobs and everything else about them are unchanged.
        #expect(second.map(withoutDeliveryCount) == first.map(withoutDeliveryCount))
        // A filtered listing in between must not disturb the rest either.
        let unregistered = try await inspector.list(.dead, filter: JobFilter(reason: "Unregistered"))
        #expect(unregistered.map(\.jobID) == ids.enumerated().filter { $0.offset % 3 == 0 }.map(\.element))
        #expect(unregistered.map(\.position) == Array(stride(from: 0, to: 500, by: 3)))
        #expect(try await bundle.depth(bundle.dead) == 500)

        let drained = try await bundle.drain(bundle.dead)
        #expect(drained.map(\.jobID) == ids)
        let deliveryCounts = drained.compactMap { $0.properties.headers?["x-delivery-count"]?.intValue }
        print("[measure] \(type.rawValue): after 3 listings, x-delivery-count of drained messages: min \(deliveryCounts.min() ?? 0), max \(deliveryCounts.max() ?? 0), present on \(deliveryCounts.count)/\(drained.count)")
    }

    @Test func listWithLimitTakesOnlyTheHead() async throws {
        let bundle = try await TestBundle.make(.quorum)
        let ids = jobIDs(50)
        try await bundle.seedDead(ids)
        let inspector = try bundle.inspector()
        #expect(try await inspector.list(.dead, limit: 7).map(\.jobID) == Array(ids.prefix(7)))
        #expect(try await inspector.list(.dead).map(\.jobID) == ids)
        #expect(try await bundle.drain(bundle.dead).map(\.jobID) == ids)
    }

    @Test func filtersByBundleReasonAndAge() async throws {
        let a = try await TestBundle.make(.classic)
        let b = try await TestBundle.make(.classic)
        let now = Date()
        let ages: [TimeInterval] = [30, 300, 3600, 7200]
        let aIDs = jobIDs(4, "a")
        try await a.seedDead(aIDs, reason: { $0 % 2 == 0 ? "Unregistered" : "PayloadTooLarge" }, failedAt: { now.addingTimeInterval(-ages[$0]) })
        try await b.seedDead(jobIDs(2, "b"), reason: { _ in "Unregistered" })
        let inspector = try a.inspector(bundles: [a.bundleID, b.bundleID])

        #expect(try await inspector.list(.dead).map(\.jobID) == aIDs + jobIDs(2, "b"))
        #expect(try await inspector.list(.dead, filter: JobFilter(bundleID: b.bundleID)).map(\.jobID) == jobIDs(2, "b"))
        #expect(try await inspector.list(.dead, filter: JobFilter(reason: "Unregistered")).map(\.jobID) == ["a-00000", "a-00002", "b-00000", "b-00001"])
        #expect(try await inspector.list(.dead, filter: JobFilter(bundleID: a.bundleID, olderThan: .seconds(600))).map(\.jobID) == ["a-00002", "a-00003"])
        #expect(try await inspector.list(.dead, filter: JobFilter(bundleID: a.bundleID, newerThan: .seconds(600))).map(\.jobID) == ["a-00000", "a-00001"])
        #expect(try await inspector.list(.dead, filter: JobFilter(bundleID: a.bundleID, olderThan: .seconds(200), newerThan: .seconds(5000))).map(\.jobID) == ["a-00001", "a-00002"])
        #expect(try await inspector.list(.dead, filter: JobFilter(reason: "Unregistered"), limit: 3).count == 3)
        #expect(try await a.depth(a.dead) == 4)
        #expect(try await b.depth(b.dead) == 2)
    }

    /// A bundle filter whose queue names AMQP cannot carry (an admin's `?bundle=` takes 255
    /// bytes, `--bundle` any length) selects no job: no queue has such a name. Each operation
    /// failed with the client's `invalidName`, which the admin answered as the broker being
    /// unreachable (503) and the page showed as a broker error.
    @Test func aBundleFilterNoQueueNameCanHoldSelectsNothing() async throws {
        let bundle = try await TestBundle.make(.classic)
        try await bundle.seedDead(jobIDs(3))
        try await bundle.seedRetry(jobIDs(2, "r"))
        let inspector = try bundle.inspector()
        // `apns.<250 bytes>` still fits; its dead and retry queues' names do not.
        let overlong = String(repeating: "b", count: 250)
        for kind in JobQueueKind.allCases {
            #expect(try await inspector.list(kind, filter: JobFilter(bundleID: overlong)).isEmpty)
            #expect(try await inspector.readyCount(kind, bundleID: overlong) == 0)
            #expect(try await inspector.show(kind, jobID: "job-00000", bundleID: overlong) == nil)
            #expect(try await inspector.requeue(kind, .all(JobFilter(bundleID: overlong))).moved == 0)
            #expect(try await inspector.purge(kind, .all(JobFilter(bundleID: overlong))).purged == 0)
        }
        #expect(try await inspector.list(.dead).map(\.jobID) == jobIDs(3))
        #expect(try await bundle.depth(bundle.dead) == 3)
        #expect(try await bundle.depth(bundle.retry(0)) == 2)
        #expect(try await bundle.depth(bundle.work) == 0)
    }

    @Test func showFindsOneJobAndLeavesTheQueueAlone() async throws {
        let bundle = try await TestBundle.make(.quorum)
        let ids = jobIDs(20)
        try await bundle.seedDead(ids, reason: { $0 == 13 ? "PayloadTooLarge" : "BadDeviceToken" })
        let inspector = try bundle.inspector()
        let job = try #require(try await inspector.show(.dead, jobID: "job-00013"))
        #expect(job.position == 13 && job.reason == "PayloadTooLarge" && job.status == 400 && job.attempts == 3)
        #expect(job.tokenRedacted == "0011…ccdd" && job.error == "test failure" && job.failedAt != nil)
        #expect(try await inspector.show(.dead, jobID: "nope") == nil)
        #expect(try await bundle.drain(bundle.dead).map(\.jobID) == ids)
    }

    @Test(arguments: [QueueType.quorum, .classic])
    func requeueByIDMovesExactlyThoseWithAttemptsReset(_ type: QueueType) async throws {
        let bundle = try await TestBundle.make(type)
        let ids = jobIDs(10)
        try await bundle.seedDead(ids, reason: { $0 == 3 ? "Unregistered" : "BadDeviceToken" })
        let report = try await bundle.inspector().requeue(.dead, .jobIDs(["job-00003", "job-00007", "missing"]))
        #expect(report == MoveReport(moved: 2, notFound: ["missing"]))

        let work = try await bundle.drain(bundle.work).sorted { ($0.jobID ?? "") < ($1.jobID ?? "") }
        #expect(work.map(\.jobID) == ["job-00003", "job-00007"])
        let headers = try #require(work.first?.properties.headers)
        #expect(headers[JobHeaders.lastReason]?.stringValue == "Unregistered")
        #expect(headers[JobHeaders.attempt] == nil && headers[JobHeaders.reason] == nil && headers[JobHeaders.attempts] == nil)
        #expect(work.first?.body == jobBody("job-00003"))
        #expect(work.first?.properties.contentType == "application/json" && work.first?.properties.deliveryMode == 2)
        #expect(try await bundle.drain(bundle.dead).map(\.jobID) == ids.filter { $0 != "job-00003" && $0 != "job-00007" })
    }

    /// Contract §4 "byte for byte" on an operator's requeue: the table the dead job carried goes
    /// back to the work queue as its bytes (keys twice and out of order, unsigned kinds, a value
    /// that is not UTF-8), less the failure headers, with `x-apns-last-reason` after them.
    @Test func requeueKeepsTheReceivedHeaderTableByteForByte() async throws {
        func entry(_ key: String, _ kind: Character, _ value: [UInt8]) -> [UInt8] {
            RawAMQPPublisher.short(key) + [UInt8(ascii: kind.unicodeScalars.first!)] + value
        }
        func text(_ text: String) -> [UInt8] { RawAMQPPublisher.long(Array(text.utf8)) }
        let kept = [
            entry("zeta", "S", text("z")), entry("dup", "B", [1]), entry("u32", "i", RawAMQPPublisher.bigEndian(UInt32.max)),
            entry("not-utf8", "S", RawAMQPPublisher.long([0xFF, 0xC3])), entry("dup", "u", RawAMQPPublisher.bigEndian(UInt16(2))),
        ]
        let failure = [
            entry(JobHeaders.reason, "S", text("BadDeviceToken")), entry(JobHeaders.attempt, "I", RawAMQPPublisher.bigEndian(Int32(2))),
            entry(JobHeaders.reason, "S", text("BadDeviceToken")),
        ]
        let table = RawAMQPPublisher.long([kept[0], failure[0], kept[1], kept[2], failure[1], kept[3], failure[2], kept[4]].flatMap { $0 })
        let bundle = try await TestBundle.make()
        var properties = AMQPProperties.persistentJSON
        properties.messageID = "job-raw"
        let set = properties.setHeaderTable(bytes: table)
        #expect(set)
        try await bundle.withConnection { connection in
            try await connection.publishAgainAfterNacks(AMQPOutboundMessage(exchange: "", routingKey: bundle.dead, body: jobBody("job-raw"), properties: properties))
        }

        let report = try await bundle.inspector().requeue(.dead, .jobIDs(["job-raw"]))
        #expect(report == MoveReport(moved: 1, notFound: []))
        // Read by a consumer: the frames' path keeps the table's bytes (basic.get does not).
        let moved = try await bundle.withConnection { connection -> AMQPDeliveredMessage? in
            let consumer = try await connection.consume(queue: bundle.work, prefetch: 1)
            for try await delivery in consumer {
                await connection.ack(delivery)
                await consumer.cancel()
                return delivery.message
            }
            return nil
        }
        let message = try #require(moved)
        #expect(message.body == jobBody("job-raw"))
        #expect(message.properties.receivedHeaderTable == RawAMQPPublisher.long((kept + [entry(JobHeaders.lastReason, "S", text("BadDeviceToken"))]).flatMap { $0 }))
    }

    @Test func requeueAllWithAFilterAndFromRetryQueues() async throws {
        let bundle = try await TestBundle.make(.quorum)
        let ids = jobIDs(30)
        try await bundle.seedDead(ids, reason: { $0 % 2 == 0 ? "Unregistered" : "BadDeviceToken" })
        let inspector = try bundle.inspector()
        #expect(try await inspector.requeue(.dead, .all(JobFilter(reason: "Unregistered"))).moved == 15)
        #expect(Set(try await bundle.drain(bundle.work).compactMap(\.jobID)) == Set(ids.enumerated().filter { $0.offset % 2 == 0 }.map(\.element)))
        #expect(try await inspector.requeue(.dead, .all(JobFilter())).moved == 15)
        #expect(try await bundle.depth(bundle.dead) == 0)
        #expect(try await bundle.drain(bundle.work).count == 15)

        try await bundle.seedRetry(jobIDs(3, "r0"), queue: 0, attempt: 2)
        try await bundle.seedRetry(jobIDs(2, "r1"), queue: 1, attempt: 4)
        let listed = try await inspector.list(.retry)
        #expect(listed.map(\.jobID) == jobIDs(3, "r0") + jobIDs(2, "r1"))
        #expect(listed.map(\.attempts) == [2, 2, 2, 4, 4] && listed.map(\.queue) == [bundle.retry(0), bundle.retry(0), bundle.retry(0), bundle.retry(1), bundle.retry(1)])
        #expect(try await inspector.requeue(.retry, .all(JobFilter())).moved == 5)
        let work = try await bundle.drain(bundle.work)
        // Moves are pipelined, so the work queue gets them in confirm order, not queue order.
        #expect(Set(work.compactMap(\.jobID)) == Set(jobIDs(3, "r0") + jobIDs(2, "r1")) && work.count == 5)
        #expect(work.allSatisfy { $0.properties.headers?[JobHeaders.attempt] == nil })
    }

    /// Tries to break moves and purges on a quorum queue: thousands of acks, each a frame of its
    /// own, the connection closed at once (no settle wait), and the queue kept busy with new
    /// dead jobs meanwhile, as a worker would. That is what lets a close overtake some of the
    /// acks (contract §4). Every purged job must be gone, and every requeued one be in the
    /// work queue only.
    @Test func noJobComesBackWhenTheCloseOvertakesItsAck() async throws {
        let bundle = try await TestBundle.make(.quorum)
        let ids = jobIDs(3000)
        try await bundle.seedDead(ids, reason: { $0 % 2 == 0 ? "Unregistered" : "BadDeviceToken" })
        let inspector = try bundle.inspector(ackSettleWait: .zero)
        let stop = StopFlag()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for publisher in 0..<4 {
                group.addTask {
                    var round = 0
                    while !stop.isSet {
                        try await bundle.seedDead(jobIDs(50, "other-\(publisher)-\(round)"), reason: { _ in "Other" })
                        round += 1
                    }
                }
            }
            #expect(try await inspector.purge(.dead, .all(JobFilter(reason: "Unregistered"))).purged == 1500)
            #expect(try await inspector.requeue(.dead, .all(JobFilter(reason: "BadDeviceToken"))).moved == 1500)
            stop.set()
            try await group.waitForAll()
        }
        let left = try await inspector.list(.dead)
        #expect(left.filter { $0.reason != "Other" }.map(\.jobID) == [])
        let work = try await bundle.drain(bundle.work).compactMap(\.jobID)
        #expect(work.count == 1500 && Set(work) == Set(ids.enumerated().filter { $0.offset % 2 == 1 }.map(\.element)))
    }

    @Test func purgeByIDByFilterAndWhole() async throws {
        let bundle = try await TestBundle.make(.quorum)
        let ids = jobIDs(12)
        try await bundle.seedDead(ids, reason: { $0 < 4 ? "Unregistered" : "BadDeviceToken" })
        let inspector = try bundle.inspector()
        #expect(try await inspector.purge(.dead, .jobIDs(["job-00005", "job-00009"])) == PurgeReport(purged: 2, notFound: []))
        #expect(try await inspector.purge(.dead, .jobIDs(["job-00006", "gone"])) == PurgeReport(purged: 1, notFound: ["gone"]))
        #expect(try await inspector.purge(.dead, .all(JobFilter(reason: "Unregistered"))).purged == 4)
        #expect(try await inspector.list(.dead).map(\.jobID) == ["job-00004", "job-00007", "job-00008", "job-00010", "job-00011"])
        #expect(try await inspector.purge(.dead, .all(JobFilter(bundleID: bundle.bundleID))) == PurgeReport(purged: 5, notFound: []))
        #expect(try await bundle.depth(bundle.dead) == 0)
        #expect(try await bundle.depth(bundle.work) == 0)
    }

    @Test(arguments: [QueueType.quorum, .classic])
    func listAndRequeueFiveThousand(_ type: QueueType) async throws {
        let bundle = try await TestBundle.make(type)
        let ids = jobIDs(5000)
        try await bundle.withConnection { connection in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for id in ids {
                    group.addTask { try await connection.publish(deadJob(id: id, to: bundle.dead, reason: "Unregistered", failedAt: Date())) }
                }
                try await group.waitForAll()
            }
        }
        let inspector = try bundle.inspector()
        let clock = ContinuousClock()
        var listed: [QueuedJob] = []
        let listing = try await clock.measure { listed = try await inspector.list(.dead) }
        // Pipelined seeding lands in confirm order: compare with a second listing.
        #expect(Set(listed.compactMap(\.jobID)) == Set(ids) && listed.count == 5000)
        #expect(try await inspector.list(.dead).map(\.jobID) == listed.map(\.jobID))
        var report = MoveReport(moved: 0, notFound: [])
        let moving = try await clock.measure { report = try await inspector.requeue(.dead, .all(JobFilter())) }
        #expect(report.moved == 5000)
        #expect(try await bundle.depth(bundle.dead) == 0)
        #expect(try await bundle.depth(bundle.work) == 5000)
        print("[measure] \(type.rawValue): list of 5000 dead jobs took \(listing), requeue of all 5000 took \(moving)")
    }

    @Test func depthsCoverEveryQueueOfTheBundle() async throws {
        let bundle = try await TestBundle.make(.quorum)
        try await bundle.seedDead(jobIDs(3))
        try await bundle.seedRetry(jobIDs(2), queue: 1)
        let depths = try await bundle.inspector(bundles: [bundle.bundleID, uniqueName("not.declared")]).depths()
        let mine = depths.filter { $0.bundleID == bundle.bundleID }
        #expect(mine.map(\.queue) == [bundle.work, bundle.retry(0), bundle.retry(1), bundle.dead])
        #expect(mine.map(\.role) == ["work", "retry", "retry", "dead"])
        #expect(mine.map(\.messages) == [0, 0, 2, 3])
        #expect(depths.last?.queue == TopologyNames.unrouted && depths.last?.role == "unrouted")
        #expect(depths.count == 5)
    }
}

private func withoutDeliveryCount(_ job: QueuedJob) -> QueuedJob {
    var job = job
    job.headers["x-delivery-count"] = nil
    return job
}

/// Tells the background publishers of a test to stop.
private final class StopFlag: Sendable {
    private let flag = Mutex(false)
    var isSet: Bool { flag.withLock { $0 } }
    func set() { flag.withLock { $0 = true } }
}
