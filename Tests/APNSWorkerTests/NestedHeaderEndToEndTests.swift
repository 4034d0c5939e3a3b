import AMQPClient
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// A publisher's header table nested as deep as the broker's frame lets it (each level a table
/// under a one-byte key: 7 bytes, so ~18,000 levels in RabbitMQ's 128 KiB frame) must not take
/// the worker down: librabbitmq decodes tables recursively on the connection's owner thread, and
/// the Swift side decodes, re-encodes, compares and frees them recursively too. Through the real
/// broker and the real `apns-worker` process, beside ordinary jobs.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct NestedHeaderEndToEndTests {
    /// A table nested `depth` levels deep, built from the inside out (no recursion here).
    static func nested(depth: Int) -> AMQPTable {
        var table: AMQPTable = ["v": .int8(1)]
        for _ in 1..<depth { table = ["n": .table(table)] }
        return table
    }

    /// Kept alive for the whole process: freeing a table this deep recurses once per level.
    nonisolated(unsafe) static var keptTables: [AMQPTable] = []

    @Test(arguments: [2_000, 18_000])
    func aDeeplyNestedHeaderTableLeavesTheWorkerUpAndEndsDead(depth: Int) async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let pid = worker.pid

        var ordinary = try await h.publishMany(10)
        let headers = Self.nested(depth: depth)
        Self.keptTables.append(headers)
        var properties = AMQPProperties.persistentJSON
        properties.headers = headers
        properties.messageID = "nested-\(depth)"
        let body = Array(#"{"token":"\#(WorkerHarness.token(900))","payload":{"aps":{"alert":"nested"}}}"#.utf8)
        try await h.connection.publishAgainAfterNacks(
            AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: h.bundle, body: body, properties: properties))
        ordinary += try await h.publishMany(10)

        let expected = Set(ordinary.map { $0.uuidString.lowercased() })
        try await waitUntil("every ordinary job delivered", timeout: .seconds(60)) {
            h.acceptedIDs().distinct.isSuperset(of: expected)
        }
        var letters: [AMQPDeliveredMessage] = []
        try await waitUntil("the nested job dead", timeout: .seconds(60)) {
            letters += try await h.drain(h.deadQueue).map(\.message)
            return !letters.isEmpty
        }
        try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }
        Self.keptTables.append(contentsOf: letters.compactMap(\.properties.headers))

        #expect(letters.count == 1)
        let letter = try #require(letters.first)
        #expect(letter.body == body, "body unchanged")
        #expect(letter.properties.messageID == "nested-\(depth)")
        #expect(letter.properties.headers?[JobHeaders.reason]?.stringValue == "MalformedJob")
        #expect(letter.properties.headers?["n"] == nil, "the nested table is not kept")
        #expect(!h.simulator.accepted().contains { $0.token == WorkerHarness.token(900) }, "the nested job is not delivered")

        let log = (try? String(contentsOfFile: worker.logPath, encoding: .utf8)) ?? ""
        #expect(WorkerHarness.connectionLosses(in: log).isEmpty, "the worker never reconnected: \(WorkerHarness.connectionLosses(in: log))")
        #expect(worker.isRunning && worker.pid == pid, "the same worker process")
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(15)) == 0)
        await h.shutdown()
    }
}
