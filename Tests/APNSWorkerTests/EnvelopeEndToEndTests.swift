import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// Contract §4, "The AMQP envelope is input too", through the real broker, the real
/// `apns-worker` process and the simulator: every property a publisher can set (each type,
/// empty, 255 bytes, not UTF-8, `user_id` naming the publisher's user, `expiration`), header
/// tables at and over the 16 KiB bound up to what the broker's 128 KiB frame carries, beside
/// ordinary jobs. The worker never reconnects, every ordinary job is delivered once, and every
/// hostile job reaches its end: delivered after a retry (its republished copy accepted by the
/// broker), or dead with the x-apns-* headers, its body and short strings as they were sent.
/// Bodies over the 64 KiB limit (64 KiB + 1, 4 MiB) end there the same way.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct EnvelopeEndToEndTests {
    /// Bytes that are not UTF-8, `count` long (U+FFFD would make them three times longer).
    static func notUTF8(_ count: Int, _ byte: UInt8 = 0xFF) -> AMQPShortString { AMQPShortString(bytes: [UInt8](repeating: byte, count: count)) }

    /// The property sets tried, each on a job that is retried once and on one that is malformed.
    static func hostileProperties(user: String) -> [(name: String, properties: AMQPProperties)] {
        func with(_ change: (inout AMQPProperties) -> Void) -> AMQPProperties {
            var properties = AMQPProperties.persistentJSON
            change(&properties)
            return properties
        }
        let nested: AMQPTable = ["level1": .table(["level2": .table(["level3": .array([.string(String(repeating: "n", count: 2_000)), .bytes([0xFF, 0x00])])])])]
        return [
            ("user_id of the publisher", with { $0.userID = user }),
            ("expiration", with { $0.expiration = "600000" }),
            (
                "short strings not UTF-8, 255 bytes",
                with {
                    for field in [AMQPProperties.ShortStringField.contentEncoding, .correlationID, .replyTo, .type, .appID] {
                        $0.setShortString(field, notUTF8(255))
                    }
                }
            ),
            ("message_id not UTF-8", with { $0.setShortString(.messageID, notUTF8(255, 0xC3)) }),
            ("message_id with CR/LF", with { $0.messageID = "id\r\nx-injected: 1" }),
            (
                "empty short strings",
                with {
                    for field in AMQPProperties.ShortStringField.allCases where field != .userID && field != .expiration {
                        $0.setShortString(field, "")
                    }
                }
            ),
            ("priority, timestamp and delivery mode edges", with { $0.priority = 255; $0.deliveryMode = 1; $0.timestamp = Date(timeIntervalSince1970: 0) }),
            ("nested headers within the bound", with { $0.headers = nested.merging(["filler": .string(String(repeating: "f", count: 12_000))]) { a, _ in a } }),
        ]
    }

    /// Header tables over the 16 KiB bound: the job is malformed whatever its body.
    static let oversizedHeaders: [(name: String, headers: AMQPTable)] = [
        ("17 KiB", ["filler": .string(String(repeating: "h", count: 17 * 1024))]),
        ("nested, 64 KiB", ["a": .table(["b": .table(["c": .bytes([UInt8](repeating: 0xFE, count: 64 * 1024))])])]),
        ("127 KiB", ["filler": .string(String(repeating: "g", count: 127 * 1024 - 200))]),
    ]

    @Test func everyPropertyAndHeaderTableAPublisherCanSendReachesItsEndWithoutAReconnect() async throws {
        let coordinates = try TestBroker.require()
        let user = try AMQPURL(string: coordinates.amqpURL).user
        let h = try await WorkerHarness.start(broker: coordinates)
        let worker = try h.startWorker()
        defer { worker.kill9() }

        // Ordinary jobs before, between and after the hostile ones.
        var ordinary = try await h.publishMany(20)
        var retried: [String: UUID] = [:]
        var deadBodies: [String: (body: [UInt8], properties: AMQPProperties)] = [:]
        for (index, (name, properties)) in Self.hostileProperties(user: user).enumerated() {
            let retryToken = WorkerHarness.token(500 + index)
            h.simulator.script(token: retryToken, .failFirst(1, status: 503, reason: .serviceUnavailable))
            let id = UUID()
            let good = Array(#"{"token":"\#(retryToken)","payload":{"aps":{"alert":"Hi"}},"id":"\#(id.uuidString)"}"#.utf8)
            try await h.connection.publishAgainAfterNacks(
                AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: h.bundle, body: good, properties: properties))
            retried[name] = id
            let malformed = Array(#"{"token":"\#(WorkerHarness.token(600 + index))","payload":{},"case":\#(index)}"#.utf8)
            try await h.connection.publishAgainAfterNacks(
                AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: h.bundle, body: malformed, properties: properties))
            deadBodies[name] = (malformed, properties)
        }
        ordinary += try await h.publishMany(20)
        for (index, (name, headers)) in Self.oversizedHeaders.enumerated() {
            var properties = AMQPProperties.persistentJSON
            properties.headers = headers
            properties.messageID = "oversized-\(index)"
            let body = Array(#"{"token":"\#(WorkerHarness.token(700 + index))","payload":{"aps":{"alert":"Hi"}}}"#.utf8)
            try await h.connection.publishAgainAfterNacks(
                AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: h.bundle, body: body, properties: properties))
            var expected = properties
            expected.headers = nil
            deadBodies["headers " + name] = (body, expected)
        }
        // Bodies over the 64 KiB limit: never held whole, yet dead with the x-apns-* headers
        // (the worker copies them to the dead queue frame by frame as they arrive).
        for (index, size) in [64 * 1024 + 1, 4 << 20].enumerated() {
            var properties = AMQPProperties.persistentJSON
            properties.messageID = "big-\(index)"
            properties.userID = user
            properties.expiration = "600000"
            properties.headers = ["trace": .string("big-\(index)")]
            let head = Array(#"{"token":"\#(WorkerHarness.token(750 + index))","payload":{"aps":{"alert":"big"}},"padding":""#.utf8)
            let body = head + [UInt8](repeating: UInt8(ascii: "x"), count: size - head.count - 2) + Array(#""}"#.utf8)
            try await h.connection.publishAgainAfterNacks(
                AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: h.bundle, body: body, properties: properties))
            deadBodies["body of \(size) bytes"] = (body, properties)
        }
        ordinary += try await h.publishMany(20)

        let expectedDelivered = Set((ordinary + Array(retried.values)).map { $0.uuidString.lowercased() })
        try await waitUntil("every ordinary and retried job delivered", timeout: .seconds(60)) {
            h.acceptedIDs().distinct.isSuperset(of: expectedDelivered)
        }
        var letters: [AMQPDeliveredMessage] = []
        try await waitUntil("every hostile job dead", timeout: .seconds(60)) {
            letters += try await h.drain(h.deadQueue).map(\.message)
            return letters.count >= deadBodies.count
        }
        try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }

        let accepted = h.simulator.accepted().filter { $0.topic == h.bundle }
        for id in expectedDelivered {
            #expect(accepted.filter { $0.apnsID.lowercased() == id }.count == 1, "job \(id) delivered exactly once")
        }
        #expect(letters.count == deadBodies.count, "no other dead letter")
        for (name, sent) in deadBodies {
            guard let letter = letters.first(where: { $0.body == sent.body }) else {
                Issue.record("\(name): no dead letter with its body unchanged")
                continue
            }
            let headers = letter.properties.headers ?? [:]
            #expect(headers[JobHeaders.reason]?.stringValue == "MalformedJob", "\(name)")
            #expect(headers[JobHeaders.status]?.intValue == 0, "\(name)")
            #expect(headers[JobHeaders.attempts]?.intValue == 0, "\(name)")
            #expect(headers[JobHeaders.failedAt]?.stringValue != nil, "\(name)")
            #expect(headers[JobHeaders.error]?.stringValue != nil, "\(name)")
            #expect(letter.properties.userID == nil, "\(name): user_id dropped")
            #expect(letter.properties.expiration == nil, "\(name): expiration dropped")
            if let originalUser = sent.properties.userID {
                #expect(headers[AMQPProperties.originalUserIDHeader]?.stringValue == originalUser, "\(name)")
            }
            for field in AMQPProperties.ShortStringField.allCases where field != .userID && field != .expiration {
                #expect(letter.properties.shortString(field) == sent.properties.shortString(field), "\(name): \(field) byte for byte")
            }
            #expect(letter.properties.priority == sent.properties.priority, "\(name)")
            #expect(letter.properties.deliveryMode == sent.properties.deliveryMode, "\(name)")
            #expect(letter.properties.timestamp == sent.properties.timestamp, "\(name)")
            for (key, value) in sent.properties.headers ?? [:] {
                #expect(headers[key] == value, "\(name): header \(key) kept")
            }
        }

        let log = (try? String(contentsOfFile: worker.logPath, encoding: .utf8)) ?? ""
        #expect(WorkerHarness.connectionLosses(in: log).isEmpty, "the worker never reconnected: \(WorkerHarness.connectionLosses(in: log))")
        #expect(!log.contains("AMQP broker closed a channel"), "no channel was closed by the broker")
        #expect(!log.contains("id\r\nx-injected"), "a message_id's CR/LF never reaches the log raw")
        #expect(worker.isRunning)
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(15)) == 0)
        await h.shutdown()
    }

    /// A `user_id` that does not name the publisher's user is refused by the broker at the
    /// publisher's end (406 on its channel): it never reaches a worker, and the publisher's
    /// next message goes through.
    @Test func aUserIDNotNamingThePublisherIsRefusedAtThePublisher() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        var properties = AMQPProperties.persistentJSON
        properties.userID = "someone-else"
        let body = Array(#"{"token":"\#(WorkerHarness.token(800))","payload":{"aps":{"alert":"Hi"}}}"#.utf8)
        await #expect(throws: AMQPError.self) {
            try await h.connection.publish(
                AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: h.bundle, body: body, properties: properties))
        }
        var after: UUID?
        try await waitUntil("the publisher's channel back and the next job delivered") {
            if after == nil { after = try? await h.publishJob(token: WorkerHarness.token(801)) }
            guard let after else { return false }
            return h.acceptedIDs().distinct.contains(after.uuidString.lowercased())
        }
        #expect(worker.isRunning)
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(15)) == 0)
        await h.shutdown()
    }
}
