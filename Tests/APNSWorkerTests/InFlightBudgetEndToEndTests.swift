import APNSSimulator
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// `[amqp] maxInFlight` through the real broker and a real `apns-worker run`: the prefetch each
/// bundle's consumer asked for is read back from the broker, not from the worker's own log.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct InFlightBudgetEndToEndTests {
    /// Four bundles, prefetch 100 and a budget of 160: each consumer takes 40 (not 100), so the
    /// instance holds at most 160 jobs, and every bundle still drains its whole backlog.
    @Test func eachBundlesConsumerTakesItsShareOfTheBudgetAndEveryBundleDrains() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 3
        options.prefetch = 100
        options.amqpLines = "maxInFlight = 160"
        let broker = try TestBroker.require()
        let h = try await WorkerHarness.start(broker: broker, options: options)
        // A backlog larger than the prefetch on every queue before the worker starts.
        var expected: [String: Set<String>] = [:]
        for (index, bundle) in h.bundles.enumerated() {
            for n in 0..<120 {
                let id = try await h.publishJob(token: WorkerHarness.token(index * 1000 + n), bundle: bundle)
                expected[bundle, default: []].insert(id.uuidString.lowercased())
            }
        }
        let worker = try h.startWorker()
        defer { worker.kill9() }

        let queues = Set(h.bundles.map(TopologyNames.workQueue))
        #expect(try await Self.consumerPrefetches(broker, queues: queues) == Dictionary(uniqueKeysWithValues: queues.map { ($0, 40) }))

        try await waitUntil("every job of every bundle delivered", timeout: .seconds(120)) {
            let accepted = h.simulator.accepted()
            return h.bundles.allSatisfy { bundle in
                expected[bundle, default: []].isSubset(of: Set(accepted.filter { $0.topic == bundle }.map { $0.apnsID.lowercased() }))
            }
        }
        for queue in queues {
            try await waitUntil("\(queue) empty") { try await h.messageCount(queue) == 0 }
        }
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        for bundle in h.bundles {
            #expect(try await h.messageCount(TopologyNames.deadQueue(bundle)) == 0)
        }
        await h.shutdown()
    }

    /// Two bundles and a budget of 40, under 2 × the floor of 32: the floor wins, each consumer
    /// takes 32, start-up says so once with the figures, and both bundles deliver.
    @Test func aBudgetUnderBundlesTimesTheFloorGivesEachTheFloorAndWarnsOnce() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        options.amqpLines = "maxInFlight = 40"
        let broker = try TestBroker.require()
        let h = try await WorkerHarness.start(broker: broker, options: options)
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let queues = Set(h.bundles.map(TopologyNames.workQueue))
        #expect(try await Self.consumerPrefetches(broker, queues: queues) == Dictionary(uniqueKeysWithValues: queues.map { ($0, 32) }))
        var ids: Set<String> = []
        for (index, bundle) in h.bundles.enumerated() {
            ids.insert(try await h.publishJob(token: WorkerHarness.token(index), bundle: bundle).uuidString.lowercased())
        }
        try await waitUntil("a job delivered on each bundle") {
            ids.isSubset(of: Set(h.simulator.accepted().map { $0.apnsID.lowercased() }))
        }
        let warning = "IN-FLIGHT BUDGET: [amqp] maxInFlight = 40 is less than 2 bundles × the floor of 32 jobs each: "
            + "each bundle's consumer takes 32, up to 64 jobs in flight"
        #expect(worker.log.components(separatedBy: warning).count - 1 == 1, "\(worker.log)")
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        await h.shutdown()
    }

    /// A written `prefetch` is the most a bundle holds unacked on an instance (contract §3), also
    /// when Apple's round trip would grow the window: 50 ms a request keeps 20 jobs in flight well
    /// under what the bundle could drain, and without the bound the consumer re-consumed with a
    /// larger prefetch (its share of `maxInFlight`, 2,000). The sum of the prefetches of every
    /// consumer on the queue, read from the broker all through the drain, never passes 20.
    @Test func aWrittenPrefetchBoundsTheConsumerWhileTheRoundTripWouldGrowTheWindow() async throws {
        var options = WorkerHarness.Options()
        options.prefetch = 20
        let broker = try TestBroker.require()
        let h = try await WorkerHarness.start(broker: broker, options: options)
        h.simulator.setFaults(SimulatorFaults(latency: .milliseconds(50)))
        let ids = Set(try await h.publishMany(1500).map { $0.uuidString.lowercased() })
        let worker = try h.startWorker()
        defer { worker.kill9() }
        var most = 0
        try await waitUntil("all 1500 delivered", timeout: .seconds(180)) {
            let consumers = try await broker.managementJSON("/consumers") as? [[String: Any]] ?? []
            let prefetches = consumers.filter { ($0["queue"] as? [String: Any])?["name"] as? String == h.workQueue }
                .map { ($0["prefetch_count"] as? NSNumber)?.intValue ?? 0 }
            most = max(most, prefetches.reduce(0, +))
            return ids.isSubset(of: h.acceptedIDs().distinct)
        }
        #expect(most == 20, "the consumers on \(h.workQueue) held up to \(most) unacked jobs")
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        #expect(try await h.messageCount(h.deadQueue) == 0)
        await h.shutdown()
    }

    /// `prefetch_count` of the consumer on each of `queues`, from the management API, once it
    /// lists one on every queue.
    static func consumerPrefetches(_ broker: BrokerCoordinates, queues: Set<String>) async throws -> [String: Int] {
        var prefetches: [String: Int] = [:]
        try await waitUntil("the broker listing a consumer on each of \(queues.count) work queues", timeout: .seconds(60)) {
            let consumers = try await broker.managementJSON("/consumers") as? [[String: Any]] ?? []
            prefetches = [:]
            for consumer in consumers {
                guard let queue = (consumer["queue"] as? [String: Any])?["name"] as? String, queues.contains(queue) else { continue }
                prefetches[queue] = (consumer["prefetch_count"] as? NSNumber)?.intValue
            }
            return prefetches.count == queues.count
        }
        return prefetches
    }
}
