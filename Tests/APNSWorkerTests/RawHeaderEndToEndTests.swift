import AMQPClient
import APNSModel
import APNSTopologyNames
import APNSSimulator
import APNSTopology
import Foundation
import Testing
import TestSupport

/// Header tables as the bytes a publisher sent, through the real broker and the real
/// `apns-worker` process, published by `RawAMQPPublisher` (no client library between the test
/// and the wire):
/// - contract §4 "byte for byte": a table no dictionary can hold (keys out of order, a key twice,
///   unsigned kinds, 2^64−1, an `S` that is not UTF-8, nesting) reaches the retry copy and the
///   dead letter as it was sent, the worker's headers after it, a forged `x-apns-reason` replaced;
/// - the owner thread's stack: `DeepHeaderFrameEndToEndTests`.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct RawHeaderEndToEndTests {
    static func entry(_ key: String, _ kind: Character, _ value: [UInt8]) -> [UInt8] {
        RawAMQPPublisher.short(key) + [UInt8(ascii: kind.unicodeScalars.first!)] + value
    }

    static func be<T: FixedWidthInteger>(_ value: T) -> [UInt8] { RawAMQPPublisher.bigEndian(value) }
    static func long(_ bytes: [UInt8]) -> [UInt8] { RawAMQPPublisher.long(bytes) }
    static func table(_ entries: [[UInt8]]) -> [UInt8] { long(entries.flatMap { $0 }) }

    static let forgedReason = entry(JobHeaders.reason, "S", long(Array("Forged".utf8)))
    static let u64 = entry("u64", "L", be(UInt64.max))
    /// RabbitMQ 3.10 re-encodes the table of a message it stores in a quorum queue, and writes
    /// an `L` (u64) as `l` (i64), bit for bit the same value: the one change the broker makes to
    /// this table on its own (checked here on a queue no worker reads).
    static let u64AsTheBrokerWritesIt = entry("u64", "l", be(UInt64.max))
    /// The received entries as the broker delivers them.
    static var delivered: [[UInt8]] { received.map { $0 == u64 ? u64AsTheBrokerWritesIt : $0 } }
    static let received: [[UInt8]] = [
        entry("zeta", "S", long(Array("last first".utf8))),
        entry("dup", "I", be(Int32(1))),
        entry("u8", "B", [200]),
        entry("u16", "u", be(UInt16(60_000))),
        entry("u32", "i", be(UInt32(4_000_000_000))),
        u64,
        entry("not-utf8", "S", long([0xFF, 0xFE, 0x41, 0xC3])),
        entry("nested", "F", table([entry("inner", "A", long([UInt8(ascii: "b"), 7, UInt8(ascii: "S")] + long([0x80]))), entry("t", "F", table([]))])),
        entry("dup", "S", long(Array("second".utf8))),
        forgedReason,
        entry("alpha", "V", []),
    ]

    /// Content type, headers, delivery mode 2, message id: properties on the wire, flags first.
    static func properties(headers: [UInt8], messageID: String) -> [UInt8] {
        let flags: UInt16 = 1 << 15 | 1 << 13 | 1 << 12 | 1 << 7
        return be(flags) + RawAMQPPublisher.short("application/json") + headers + [2] + RawAMQPPublisher.short(messageID)
    }

    /// The next `count` messages of `queue`, through a consumer: the frames' path, which keeps a
    /// header table's bytes as the broker sent them.
    static func consume(_ h: WorkerHarness, _ queue: String, count: Int) async throws -> [AMQPDeliveredMessage] {
        try await waitUntil("\(count) message(s) in \(queue)", timeout: .seconds(60)) { try await h.messageCount(queue) >= count }
        let consumer = try await h.connection.consume(queue: queue, prefetch: UInt16(count))
        var out: [AMQPDeliveredMessage] = []
        for try await delivery in consumer {
            out.append(delivery.message)
            await h.connection.ack(delivery)
            if out.count == count { break }
        }
        await consumer.cancel()
        return out
    }

    @Test func aReceivedHeaderTableReachesTheRetryCopyAndTheDeadLetterByteForByte() async throws {
        var options = WorkerHarness.Options()
        // The retry copy waits in its queue for the test to read it.
        options.retryDelays = [.seconds(600)]
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let pid = worker.pid

        var ordinary = try await h.publishMany(10)
        let publisher = try RawAMQPPublisher(port: try TestBroker.require().amqpPort)
        let headers = Self.table(Self.received)
        let retryToken = WorkerHarness.token(810)
        h.simulator.script(token: retryToken, .failFirst(1, status: 503, reason: .serviceUnavailable))
        let retryID = UUID()
        let retried = Array(#"{"token":"\#(retryToken)","payload":{"aps":{"alert":"Hi"}},"id":"\#(retryID.uuidString)"}"#.utf8)
        try publisher.publish(
            exchange: TopologyNames.jobsExchange, routingKey: h.bundle, properties: Self.properties(headers: headers, messageID: retryID.uuidString),
            body: retried)
        let malformed = Array(#"{"token":"\#(WorkerHarness.token(811))","payload":{}}"#.utf8)
        try publisher.publish(
            exchange: TopologyNames.jobsExchange, routingKey: h.bundle, properties: Self.properties(headers: headers, messageID: "dead"),
            body: malformed)
        // The control: the same properties through a quorum queue no worker reads.
        let control = uniqueName("e2e.raw-control")
        try await h.connection.declareQueue(QueueDeclaration(name: control, arguments: ["x-queue-type": .string("quorum")]))
        try publisher.publish(exchange: "", routingKey: control, properties: Self.properties(headers: headers, messageID: "control"), body: [])
        try publisher.close()
        ordinary += try await h.publishMany(10)

        let controlCopy = try #require(try await Self.consume(h, control, count: 1).first)
        #expect(controlCopy.properties.receivedHeaderTable == Self.table(Self.delivered), "what the broker itself changes: L written as l")
        _ = try? await h.connection.deleteQueue(control)

        let retryQueue = TopologyNames.retryQueue(h.bundle, delay: .seconds(600))
        let retryCopy = try #require(try await Self.consume(h, retryQueue, count: 1).first)
        let letter = try #require(try await Self.consume(h, h.deadQueue, count: 1).first)
        try await waitUntil("every ordinary job delivered", timeout: .seconds(60)) {
            h.acceptedIDs().distinct.isSuperset(of: Set(ordinary.map { $0.uuidString.lowercased() }))
        }

        // The retry copy: every entry as sent (the forged reason too: the worker writes no
        // reason on a retry), then the attempt count.
        #expect(retryCopy.body == retried)
        #expect(retryCopy.properties.messageID == retryID.uuidString)
        #expect(
            retryCopy.properties.receivedHeaderTable == Self.table(Self.delivered + [Self.entry(JobHeaders.attempt, "I", Self.be(Int32(1)))]),
            "the retry copy's table: the received entries byte for byte, then x-apns-attempt")

        // The dead letter: every entry as sent but the forged reason, then the five failure
        // headers, the reason once.
        #expect(letter.body == malformed)
        let deadTable = try #require(letter.properties.receivedHeaderTable)
        let kept = Self.delivered.filter { $0 != Self.forgedReason }.flatMap { $0 }
        #expect(Array(deadTable.dropFirst(4).prefix(kept.count)) == kept, "the received entries first, unchanged, in their order")
        let failureKeys: Set = [JobHeaders.reason, JobHeaders.status, JobHeaders.attempts, JobHeaders.failedAt, JobHeaders.error]
        #expect(HeaderTableBytes.removing(keys: failureKeys, from: deadTable) == Self.long(kept), "nothing else")
        let withoutReason = try #require(HeaderTableBytes.removing(keys: [JobHeaders.reason], from: deadTable))
        #expect(deadTable.count - withoutReason.count == Self.entry(JobHeaders.reason, "S", Self.long(Array("MalformedJob".utf8))).count, "one reason, ours")
        #expect(letter.properties.headers?[JobHeaders.reason] == .string("MalformedJob"))
        #expect(letter.properties.headers?[JobHeaders.status]?.intValue == 0)

        let log = (try? String(contentsOfFile: worker.logPath, encoding: .utf8)) ?? ""
        #expect(WorkerHarness.connectionLosses(in: log).isEmpty, "the worker never reconnected: \(WorkerHarness.connectionLosses(in: log))")
        #expect(worker.isRunning && worker.pid == pid)
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(15)) == 0)
        await h.shutdown()
    }

}

/// The owner thread's stack, tried for real: on a broker of the test's own offering the largest
/// frame the worker takes (1 MiB), a job whose header table nests as deep as that frame holds
/// (149,790 levels, 7 bytes each; librabbitmq decodes it recursively on the owner thread, about
/// 19 MB of stack, more than a default 8 MiB thread has) ends dead `MalformedJob` and leaves the
/// worker up and delivering. RabbitMQ 3.10's own table parser is quadratic in the depth, and
/// accepting the 1 MiB publish takes the broker minutes (0.18 s at 5,000 levels, 0.97 s at
/// 10,000, 4.35 s at 20,000; the whole 1 MiB case 863 s once): `scripts/test --slow` (CI) tries
/// RabbitMQ's default 128 KiB frame (about 18,700 levels, seconds), and the 1 MiB frame only
/// with `APNS_TEST_DEEP_FRAME=1` as well.
@Suite(
    .serialized,
    .enabled(if: TestBroker.isAvailable && ProcessInfo.processInfo.environment["APNS_TEST_SLOW"] == "1", "a slow test: scripts/test --slow"))
struct DeepHeaderFrameEndToEndTests {
    typealias Raw = RawHeaderEndToEndTests

    /// A table nested `depth` levels (each a table under the key "n", 7 bytes a level; the
    /// innermost holds "v" = 1), built forwards: a level's length is known from the depth.
    static func nestedTable(depth: Int) -> [UInt8] {
        let innermost = Raw.entry("v", "b", [1])
        var out: [UInt8] = []
        out.reserveCapacity(depth * 7 + innermost.count + 4)
        for level in 0..<depth {
            let bodyLength = (depth - level - 1) * 7 + innermost.count
            out += Raw.be(UInt32(bodyLength))
            if level < depth - 1 { out += Array("\u{1}nF".utf8) }
        }
        return out + innermost
    }

    static let frameSizes = [128 * 1024] + (ProcessInfo.processInfo.environment["APNS_TEST_DEEP_FRAME"] == "1" ? [1 << 20] : [])

    @Test(arguments: frameSizes)
    func aTableNestedAsDeepAsTheFrameEndsDeadAndTheWorkerStaysUp(frameMax: Int) async throws {
        try await withPrivateBroker(frameMax: frameMax) { broker in
            let h = try await WorkerHarness.start(broker: broker.coordinates)
            let worker = try h.startWorker()
            defer { worker.kill9() }
            let pid = worker.pid

            var ordinary = try await h.publishMany(10)
            let publisher = try RawAMQPPublisher(port: broker.coordinates.amqpPort, timeout: .seconds(900))
            #expect(publisher.frameMax == frameMax, "the broker offers the frame asked for")
            // As deep as fits the header frame (frame overhead 8; class, weight and body size
            // 12; the properties without a table; the table: 7 bytes a level, plus 1).
            let fixed = 8 + 12 + Raw.properties(headers: [], messageID: "deep").count
            let depth = (publisher.frameMax - fixed - 1) / 7
            let headers = Self.nestedTable(depth: depth)
            let properties = Raw.properties(headers: headers, messageID: "deep")
            #expect(properties.count + 20 <= publisher.frameMax && properties.count + 20 + 7 > publisher.frameMax, "as deep as the frame allows")
            #expect(depth > frameMax / 8)
            let body = Array(#"{"token":"\#(WorkerHarness.token(820))","payload":{"aps":{"alert":"deep"}}}"#.utf8)
            try publisher.publish(exchange: TopologyNames.jobsExchange, routingKey: h.bundle, properties: properties, body: body)
            try publisher.close()
            ordinary += try await h.publishMany(10)

            try await waitUntil("every ordinary job delivered", timeout: .seconds(120)) {
                h.acceptedIDs().distinct.isSuperset(of: Set(ordinary.map { $0.uuidString.lowercased() }))
            }
            var letters: [AMQPDeliveredMessage] = []
            try await waitUntil("the deep job dead", timeout: .seconds(120)) {
                letters += try await h.drain(h.deadQueue).map(\.message)
                return !letters.isEmpty
            }
            try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }
            #expect(letters.count == 1)
            let letter = try #require(letters.first)
            #expect(letter.body == body, "body unchanged")
            #expect(letter.properties.messageID == "deep")
            #expect(letter.properties.headers?[JobHeaders.reason]?.stringValue == "MalformedJob")
            #expect(letter.properties.headers?["n"] == nil, "the nested table is not kept")
            #expect(!h.simulator.accepted().contains { $0.token == WorkerHarness.token(820) }, "the deep job is not delivered")

            let log = (try? String(contentsOfFile: worker.logPath, encoding: .utf8)) ?? ""
            #expect(WorkerHarness.connectionLosses(in: log).isEmpty, "the worker never reconnected: \(WorkerHarness.connectionLosses(in: log))")
            #expect(worker.isRunning && worker.pid == pid, "the same worker process")
            worker.signal(SIGTERM)
            #expect(await worker.waitForExit(timeout: .seconds(15)) == 0)
            await h.shutdown()
        }
    }
}
