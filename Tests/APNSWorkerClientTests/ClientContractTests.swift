// What a sync server relies on, against the real test broker: Encodable payloads and userInfo,
// typed errors it can switch on, a publish that waits for a lost connection to come back, and
// feedback events acked only when handled (an unacked one comes back); plus the feedback parser
// on hostile bodies (pure).
import AMQPClient
import APNSJSON
import APNSModel
import APNSTopology
import APNSTopologyNames
import APNSWorkerClient
import Foundation
import Logging
import Testing
import TestSupport

struct FeedbackParserTests {
    static let token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

    @Test func readsTheWorkersTokenAndChannelEvents() throws {
        let token = try FeedbackEvent.parse(Array(
            #"{"bundleId":"com.example.app","jobId":"4f1c9f5e-0c0b-4c65-9a38-6e3b2f0b8c11","reason":"Unregistered","timestamp":1700000000000,"token":"\#(Self.token.uppercased())"}"#.utf8)).get()
        #expect(token == FeedbackEvent(
            bundleID: "com.example.app", target: .token(Self.token), reason: "Unregistered", timestamp: 1_700_000_000_000,
            jobID: "4f1c9f5e-0c0b-4c65-9a38-6e3b2f0b8c11"))
        let channel = try FeedbackEvent.parse(Array(
            #"{"bundleId":"com.example.app","channel":"dHN0","jobId":null,"reason":"BadChannelId","timestamp":null}"#.utf8)).get()
        #expect(channel.target == .channel("dHN0") && channel.timestamp == nil && channel.jobID == nil)
    }

    @Test(arguments: [
        "", "null", "[]", "{}", #"{"bundleId":"com.example.app","reason":"Unregistered"}"#,
        #"{"bundleId":"com.example.app","reason":"Unregistered","token":"00","channel":"c"}"#,
        #"{"bundleId":"com.example.app","reason":"Unregistered","token":"zz"}"#,
        #"{"bundleId":"com.example.app","reason":"Unregistered","token":""}"#,
        #"{"bundleId":"com.example.app","reason":"Unregistered","token":"００"}"#,
        #"{"bundleId":"com example","reason":"Unregistered","token":"00"}"#,
        #"{"bundleId":"com.example.app","reason":"a\nb","token":"00"}"#,
        #"{"bundleId":"com.example.app","reason":"Unregistered","token":"00","timestamp":1.5}"#,
        #"{"bundleId":"com.example.app","reason":"Unregistered","token":"00","timestamp":"1"}"#,
        #"{"bundleId":"com.example.app","reason":"Unregistered","token":"00","timestamp":99999999999999999999}"#,
        #"{"bundleId":"com.example.app","reason":7,"token":"00"}"#,
    ])
    func refusesWhatIsNotAnEvent(body: String) {
        guard case .failure(let error) = FeedbackEvent.parse(Array(body.utf8)) else {
            Issue.record("accepted \(body)")
            return
        }
        #expect(!error.message.isEmpty)
    }

    @Test func refusesAnOversizedBodyBeforeParsing() {
        let body = Array(#"{"bundleId":"com.example.app","reason":"Unregistered","token":"00","pad":""#.utf8)
            + [UInt8](repeating: 0x61, count: FeedbackEvent.maxBodyBytes) + Array(#""}"#.utf8)
        guard case .failure(let error) = FeedbackEvent.parse(body) else { Issue.record("accepted"); return }
        #expect(error.message.contains("at most \(FeedbackEvent.maxBodyBytes)"))
    }
}

struct EncodablePayloadTests {
    struct SyncPayload: Encodable {
        struct APS: Encodable {
            var contentAvailable = 1
            enum CodingKeys: String, CodingKey { case contentAvailable = "content-available" }
        }
        var aps = APS()
        var account: String
    }

    struct Audit: Encodable {
        var syncServer: String
        var change: Int
    }

    @Test func encodesPayloadAndUserInfoTheWorkerReads() throws {
        let job = NotificationJob(
            bundleID: "com.example.app", token: FeedbackParserTests.token, payload: try APNSPayload(SyncPayload(account: "42")),
            options: DeliveryOptions(userInfo: try UserInfo(Audit(syncServer: "sync-1", change: 7))))
        let parsed = try JobParser.parse(body: job.body(), bundleID: "com.example.app", messageID: nil, defaultEnvironment: .production, transport: .http2).get()
        #expect(parsed.pushType == .background)
        #expect(parsed.userInfo["syncServer"] == .string("sync-1"))
        #expect(parsed.userInfo["change"] == .integer(7))
        #expect(String(decoding: job.body(), as: UTF8.self).contains(#""account":"42""#))
    }

    @Test func refusesWhatDoesNotEncodeToAnObject() {
        #expect(throws: APNSWorkerClientError.self) { try APNSPayload([1, 2]) }
        #expect(throws: APNSWorkerClientError.self) { try UserInfo(["x": Double.nan]) }
        do throws(APNSWorkerClientError) {
            _ = try UserInfo("text")
            Issue.record("a string became userInfo")
        } catch {
            guard case .encodingFailed = error else { Issue.record("\(error)"); return }
        }
    }

    /// Contract §2: at most 4096 bytes as sent, 5120 for voip; the typed error says which.
    @Test func payloadLimitsAreTheContracts() throws {
        func job(_ bytes: Int, _ type: PushType) -> NotificationJob {
            let filler = String(repeating: "x", count: bytes - #"{"aps":{"alert":""}}"#.utf8.count)
            return NotificationJob(
                bundleID: "com.example.app", token: FeedbackParserTests.token, payload: APNSPayload(json: #"{"aps":{"alert":"\#(filler)"}}"#),
                options: DeliveryOptions(pushType: type))
        }
        try job(4096, .alert).validate()
        try job(5120, .voip).validate()
        for (bytes, type) in [(4097, PushType.alert), (5121, .voip)] {
            do throws(APNSWorkerClientError) {
                try job(bytes, type).validate()
                Issue.record("\(bytes) bytes of \(type) accepted")
            } catch {
                guard case .payloadTooLarge(let why) = error else { Issue.record("\(error)"); continue }
                #expect(why.reason == "PayloadTooLarge")
            }
        }
    }
}

@Suite(.enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"), .serialized)
struct ClientBrokerTests {
    static var logger: Logger {
        var logger = Logger(label: "client-contract-tests")
        logger.logLevel = .warning
        return logger
    }

    /// A user of the test's own, so that taking its permissions away keeps one client from
    /// reconnecting without disturbing anything else on the shared broker.
    static func withUser<T>(_ body: (String) async throws -> T) async throws -> T {
        let broker = try TestBroker.require()
        let user = uniqueName("client-user")
        try await broker.ctl("add_user", user, "secret")
        try await broker.ctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")
        do {
            let result = try await body(user)
            try await broker.ctl("delete_user", user)
            return result
        } catch {
            _ = try? await broker.ctl("delete_user", user)
            throw error
        }
    }

    /// The management API's name of our connection named `name` (listed within a few seconds).
    static func listedConnection(_ name: String) async throws -> String {
        let broker = try TestBroker.require()
        var entryName: String?
        try await waitUntil("connection \(name) listed") {
            let connections = try await broker.managementJSON("/connections") as? [[String: Any]] ?? []
            entryName = connections.first(where: {
                ($0["client_properties"] as? [String: Any])?["connection_name"] as? String == name
            })?["name"] as? String
            return entryName != nil
        }
        return entryName!
    }

    /// Closes the broker side of a connection (management API DELETE); one already gone is fine.
    static func forceClose(_ entryName: String) async throws {
        let broker = try TestBroker.require()
        let encoded = entryName.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? entryName
        _ = try await runProcess("/usr/bin/curl", ["-sS", "-u", "guest:guest", "-X", "DELETE", broker.managementURL + "/api/connections/" + encoded])
    }

    /// While the connection is down, a publish waits for it (up to its deadline) and is
    /// confirmed once it is back; past the deadline it fails with `connectionUnavailable`.
    @Test func publishWaitsForTheConnectionToComeBack() async throws {
        let broker = try TestBroker.require()
        let bundle = uniqueName("com.example.client")
        try await Self.withUser { user in
            try await APNSWorkerClientTests.withTap(exchange: TopologyNames.jobsExchange, kind: .direct, routingKey: bundle) { tap, queue in
                let url = broker.amqpURL.replacingOccurrences(of: "guest:guest@", with: "\(user):secret@")
                let name = uniqueName("client-reconnect")
                let job = NotificationJob(bundleID: bundle, token: FeedbackParserTests.token, payload: .alert("after the drop"))
                let client = try await APNSWorkerClient.connect(urls: [url], connectionName: name, logger: Self.logger)
                do {
                    let entry = try await Self.listedConnection(name)
                    // Without permissions the client's reconnects are refused until they are back.
                    try await broker.ctl("clear_permissions", "-p", "/", user)
                    try await Self.forceClose(entry)
                    try await waitUntil("the client to see its connection gone") { !client.isConnected }
                    do throws(APNSWorkerClientError) {
                        try await client.publish(job, deadline: .milliseconds(300))
                        Issue.record("published without a connection")
                    } catch {
                        guard case .connectionUnavailable = error else { Issue.record("\(error)"); throw error }
                    }
                    #expect(!client.isConnected)
                    let waiting = Task { try await client.publish(job, deadline: .seconds(120)) }
                    try await broker.ctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")
                    try await waiting.value
                    #expect(client.isConnected)
                    await client.close()
                } catch {
                    await client.close()
                    throw error
                }
                let message = try await APNSWorkerClientTests.take(tap, queue)
                #expect(message.properties.messageID == job.id.uuidString.lowercased())
            }
        }
    }

    /// The next feedback event, or a failure once `timeout` passed without one (the wait is
    /// cancelled, which the consumer's buffer honours).
    static func nextEvent(_ events: FeedbackEvents, within timeout: Duration = .seconds(60)) async throws -> FeedbackDelivery {
        let waiting = Task {
            var iterator = events.makeAsyncIterator()
            return try await iterator.next()
        }
        let timer = Task {
            try await Task.sleep(for: timeout)
            waiting.cancel()
        }
        defer { timer.cancel() }
        guard let delivery = try? await waiting.value else { throw TestSupportError("no feedback event within \(timeout)") }
        return delivery
    }

    static func feedbackBody(bundle: String, token: String, reason: String = "Unregistered") -> [UInt8] {
        Array(#"{"bundleId":"\#(bundle)","jobId":null,"reason":"\#(reason)","timestamp":1700000000000,"token":"\#(token)"}"#.utf8)
    }

    /// Events are acked as handled: an acked one is gone, an unacked one comes back (redelivered)
    /// to the next consumer once the first is gone, and a malformed message goes to the dead
    /// queue with its body unchanged while the sequence goes on.
    @Test func feedbackEventsAreAckedAsHandled() async throws {
        let broker = try TestBroker.require()
        let bundle = uniqueName("com.example.client")
        let queue = uniqueName("sync-feedback")
        let first = String(repeating: "a1", count: 32)
        let second = String(repeating: "b2", count: 32)
        let garbage = Array(#"{"bundleId":"\#(bundle)","reason":"Unregistered"}"#.utf8)
        let client = try await APNSWorkerClient.connect(url: broker.amqpURL, logger: Self.logger)
        let events = try await client.feedback(queue: queue, bundleIDs: [bundle], prefetch: 10)
        try await AMQPConnection.withConnection(
            configuration: try AMQPConfiguration(urlStrings: [broker.amqpURL], connectionName: "client-test-feedback"), logger: Self.logger
        ) { publisher in
            for body in [Self.feedbackBody(bundle: bundle, token: first), garbage, Self.feedbackBody(bundle: bundle, token: second)] {
                try await publisher.publishAgainAfterNacks(AMQPOutboundMessage(
                    exchange: TopologyNames.feedbackExchange, routingKey: bundle, body: body, properties: .persistentJSON))
            }
            let one = try await Self.nextEvent(events)
            #expect(one.event.target == .token(first) && one.event.bundleID == bundle && !one.redelivered)
            #expect(one.ack())
            let two = try await Self.nextEvent(events)
            #expect(two.event.target == .token(second))
            // Not acked: the consumer goes away with it.
            await client.close()
            let dead = try await APNSWorkerClientTests.take(publisher, FeedbackEvents.deadQueue(of: queue))
            #expect(dead.body == garbage)
            #expect(dead.properties.headers?["x-apns-reason"]?.stringValue == "MalformedFeedback")

            let again = try await APNSWorkerClient.connect(url: broker.amqpURL, logger: Self.logger)
            let more = try await again.feedback(queue: queue, bundleIDs: [bundle])
            let back = try await Self.nextEvent(more)
            #expect(back.event.target == .token(second) && back.redelivered)
            #expect(back.ack())
            await again.close()
            // Both consumers are gone and the queue holds nothing, ready or unacked: an acked
            // event never comes back.
            try await waitUntil("\(queue) empty, ready and unacked", timeout: .seconds(60)) {
                let info = try await broker.managementJSON("/queues/%2F/\(queue)") as? [String: Any]
                return info?["messages"] as? Int == 0 && info?["consumers"] as? Int == 0
            }
            #expect(try await publisher.inspectQueue(queue).messageCount == 0)
            _ = try await publisher.deleteQueue(queue)
            _ = try await publisher.deleteQueue(FeedbackEvents.deadQueue(of: queue))
        }
    }
}
