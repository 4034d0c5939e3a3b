// APNSWorkerClient against the real test broker: what it publishes is what the worker reads
// (parsed back with the worker's parsers from the queues the worker consumes), confirmed; and a
// message the worker would refuse fails at the producer with the worker's message, with nothing
// published.
import AMQPClient
import APNSModel
import APNSRegistryMessages
import APNSTopology
import APNSTopologyNames
import APNSWorkerClient
import Foundation
import Logging
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"), .serialized)
struct APNSWorkerClientTests {
    static let token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

    static var logger: Logger {
        var logger = Logger(label: "client-tests")
        logger.logLevel = .warning
        return logger
    }

    /// A connection of the test's own, and a queue bound to `exchange` (`routingKey`) to read what the client sent.
    static func withTap<T>(
        exchange: String, kind: ExchangeDeclaration.Kind, routingKey: String, _ body: (AMQPConnection, String) async throws -> T
    ) async throws -> T {
        let broker = try TestBroker.require()
        return try await AMQPConnection.withConnection(
            configuration: try AMQPConfiguration(urlStrings: [broker.amqpURL], connectionName: "client-test-tap"), logger: logger
        ) { connection in
            let queue = uniqueName("client-test-tap")
            if exchange == TopologyNames.jobsExchange {
                try await connection.declare(TopologyPlan(bundleIDs: [], retryDelays: [], queueType: .quorum))
            } else {
                try await connection.declareExchange(ExchangeDeclaration(name: exchange, kind: kind))
            }
            _ = try await connection.declareQueue(QueueDeclaration(name: queue))
            try await connection.bind(BindingDeclaration(queue: queue, exchange: exchange, routingKey: routingKey))
            let result = try await body(connection, queue)
            _ = try? await connection.deleteQueue(queue)
            return result
        }
    }

    /// The next message of `queue` whose body contains `marker` (the fanout exchanges also carry
    /// other tests' messages, which are skipped).
    static func take(_ connection: AMQPConnection, _ queue: String, containing marker: String = "") async throws -> AMQPDeliveredMessage {
        var found: AMQPDeliveredMessage?
        try await waitUntil("the published message in \(queue)") {
            guard let delivery = try await connection.get(queue: queue) else { return false }
            _ = await connection.ack(delivery)
            if marker.isEmpty || String(decoding: delivery.message.body, as: UTF8.self).contains(marker) { found = delivery.message }
            return found != nil
        }
        return found!
    }

    @Test func publishesAJobTheWorkerReads() async throws {
        let bundle = uniqueName("com.example.client")
        try await Self.withTap(exchange: TopologyNames.jobsExchange, kind: .direct, routingKey: bundle) { tap, queue in
            let client = try await APNSWorkerClient.connect(url: try TestBroker.require().amqpURL, logger: Self.logger)
            let job = NotificationJob(
                bundleID: bundle, token: Self.token, payload: APNSPayload(json: #"{"aps":{"alert":"Hi"},"z":1,"a":2}"#),
                options: DeliveryOptions(pushType: .alert, priority: 5, collapseID: "inbox", userInfo: ["syncServer": "sync-1"]),
                environment: .sandbox)
            try await client.publish(job)
            await client.close()
            let message = try await Self.take(tap, queue)
            #expect(message.properties.deliveryMode == 2 && message.properties.contentType == "application/json")
            #expect(message.properties.messageID == job.id.uuidString.lowercased())
            let parsed = try JobParser.parse(
                body: message.body, bundleID: bundle, messageID: nil, defaultEnvironment: .production, transport: .http2
            ).get()
            #expect(parsed.id == job.id)
            #expect(parsed.environment == .sandbox)
            // The payload reaches the worker with its own key order.
            #expect(String(decoding: message.body, as: UTF8.self).contains(#""payload":{"aps":{"alert":"Hi"},"z":1,"a":2}"#))
        }
    }

    @Test func aMalformedJobFailsAtTheProducerWithTheWorkersMessage() async throws {
        let bundle = uniqueName("com.example.client")
        try await Self.withTap(exchange: TopologyNames.jobsExchange, kind: .direct, routingKey: bundle) { tap, queue in
            let client = try await APNSWorkerClient.connect(url: try TestBroker.require().amqpURL, logger: Self.logger)
            let bad = NotificationJob(bundleID: bundle, token: Self.token, payload: .alert("x"), options: DeliveryOptions(priority: 7))
            let workerSays = JobParser.parse(body: bad.body(), bundleID: bundle, messageID: nil, defaultEnvironment: .production, transport: .http2)
            guard case .failure(let expected) = workerSays else { Issue.record("the worker accepts priority 7"); return }
            await #expect(throws: APNSWorkerClientError.invalidMessage(expected)) { try await client.publish(bad) }
            #expect("\(APNSWorkerClientError.invalidMessage(expected))" == "priority: must be 10, 5 or 1, got 7")
            let noAPS = NotificationJob(bundleID: bundle, token: Self.token, payload: APNSPayload(json: #"{"alert":"no aps"}"#))
            await #expect(throws: APNSWorkerClientError.self) { try await client.publish(noAPS) }
            // A bundle ID no worker can be configured for (it would wait in apns.unrouted), or
            // longer than a routing key (the broker could not be sent it): refused by name.
            for bundleID in ["com example", "com." + String(repeating: "x", count: 152), "com." + String(repeating: "x", count: 300), ""] {
                let job = NotificationJob(bundleID: bundleID, token: Self.token, payload: .alert("x"))
                await #expect(throws: APNSWorkerClientError.invalidMessage(JobError(
                    kind: .malformedJob, field: "bundleID", message: #"not a bundle ID: 1 to 155 bytes of letters, digits, "." and "-""#))) {
                    try await client.publish(job)
                }
                let broadcast = BroadcastJob(bundleID: bundleID, channel: "dHN0LXNyY2gtY2hubA==", payload: .alert("x"))
                await #expect(throws: APNSWorkerClientError.self) { try await client.publish(broadcast) }
            }
            // A good job after them: the only message in the queue.
            try await client.publish(NotificationJob(bundleID: bundle, token: Self.token, payload: .alert("ok")))
            await client.close()
            let message = try await Self.take(tap, queue)
            #expect(String(decoding: message.body, as: UTF8.self).contains(#""alert":"ok""#))
            #expect(try await tap.get(queue: queue) == nil)
        }
    }

    /// A broadcast job (contract §7) reaches the bundle's routing key with `channel` in place of
    /// `token`, and what the worker would refuse (a collapse id, another push type) fails first.
    @Test func publishesABroadcastJobTheWorkerReads() async throws {
        let bundle = uniqueName("com.example.client")
        let channel = "dHN0LXNyY2gtY2hubA=="
        try await Self.withTap(exchange: TopologyNames.jobsExchange, kind: .direct, routingKey: bundle) { tap, queue in
            let client = try await APNSWorkerClient.connect(url: try TestBroker.require().amqpURL, logger: Self.logger)
            let update = APNSPayload(json: #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}"#)
            await #expect(throws: APNSWorkerClientError.self) {
                try await client.publish(BroadcastJob(bundleID: bundle, channel: channel, payload: update, options: DeliveryOptions(collapseID: "c")))
            }
            await #expect(throws: APNSWorkerClientError.self) {
                try await client.publish(BroadcastJob(bundleID: bundle, channel: channel, payload: update, options: DeliveryOptions(pushType: .alert)))
            }
            let job = BroadcastJob(bundleID: bundle, channel: channel, payload: update, options: DeliveryOptions(priority: 5))
            try await client.publish(job)
            await client.close()
            let message = try await Self.take(tap, queue)
            let parsed = try JobParser.parse(
                body: message.body, bundleID: bundle, messageID: nil, defaultEnvironment: .production, transport: .http2
            ).get()
            #expect(parsed.id == job.id && parsed.priority == 5 && parsed.pushType == .liveactivity)
            #expect(parsed.token == nil)
            #expect(String(decoding: message.body, as: UTF8.self).contains(#""channel":"\#(channel)""#))
            #expect(try await tap.get(queue: queue) == nil)
        }
    }

    @Test func publishesGroupJobsAndRegistrations() async throws {
        let group = uniqueName("account")
        let client = try await APNSWorkerClient.connect(url: try TestBroker.require().amqpURL, logger: Self.logger)
        defer { Task { await client.close() } }
        try await Self.withTap(exchange: TopologyNames.groups, kind: .fanout, routingKey: "") { tap, queue in
            let job = GroupNotificationJob(group: group, payload: .contentAvailable, except: [Self.token.uppercased()], bundleIDs: ["com.example.app"])
            try await client.publish(job)
            let parsed = try GroupJobParser.parse(body: try await Self.take(tap, queue, containing: group).body, messageID: nil).get()
            #expect(parsed.group == group && parsed.id == job.id && parsed.except == Set([Self.token]) && parsed.bundleIDs == Set(["com.example.app"]))
            await #expect(throws: APNSWorkerClientError.self) { try await client.publish(GroupNotificationJob(group: "", payload: .contentAvailable)) }
        }
        try await Self.withTap(exchange: TopologyNames.registry, kind: .fanout, routingKey: "") { tap, queue in
            let registration = Registration(operation: .register, bundleID: "com.example.app", token: Self.token, group: group, at: 1_767_225_600_000)
            try await client.publish(registration)
            let parsed = try RegistrationMessage.parse(body: try await Self.take(tap, queue, containing: group).body).get()
            #expect(parsed == RegistrationMessage(op: .register, bundleID: "com.example.app", token: Self.token, group: group, at: 1_767_225_600_000))
            let noGroup = Registration(operation: .register, bundleID: "com.example.app", token: Self.token, group: nil)
            await #expect(throws: APNSWorkerClientError.self) { try await client.publish(noGroup) }
            let bundle = uniqueName("com.example.client")
            try await client.publish(Registration.unregister(bundleID: bundle, token: Self.token))
            #expect(try RegistrationMessage.parse(body: try await Self.take(tap, queue, containing: bundle).body).get().op == .unregister)
        }
    }

    @Test func encodesEveryOptionTheWorkerKnows() throws {
        let job = NotificationJob(
            bundleID: "com.example.app", token: Self.token, payload: .alert("a \"quoted\" line\n"),
            options: DeliveryOptions(pushType: .background, priority: 5, expiration: 0, collapseID: "c", userInfo: ["b": "2", "a": "1"]),
            id: UUID(uuidString: "4F1C9F5E-0C0B-4C65-9A38-6E3B2F0B8C11")!)
        #expect(
            String(decoding: job.body(), as: UTF8.self)
                == #"{"id":"4f1c9f5e-0c0b-4c65-9a38-6e3b2f0b8c11","token":"\#(Self.token)","payload":{"aps":{"alert":"a \"quoted\" line\n"}},"pushType":"background","priority":5,"expiration":0,"collapseId":"c","userInfo":{"a":"1","b":"2"}}"#)
        try job.validate()
    }

    /// `apns-worker publish` and `registry register` go through the client: published and
    /// confirmed when the worker would take the message, refused with its message otherwise.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: workerExecutable)))
    func theCLIPublishesThroughTheClient() async throws {
        let url = try TestBroker.require().amqpURL
        let bundle = uniqueName("com.example.client")
        try await Self.withTap(exchange: TopologyNames.jobsExchange, kind: .direct, routingKey: bundle) { tap, queue in
            let job = ["publish", "--url", url, "--bundle", bundle, "--token", Self.token, "--alert", "Hi"]
            let bad = try await runProcess(workerExecutable, job + ["--priority", "7"])
            #expect(bad.status == 1)
            #expect(bad.stderr.contains("the worker would refuse this job, nothing published: priority: must be 10, 5 or 1, got 7"), "\(bad.stderr)")
            let good = try await runProcess(workerExecutable, job + ["--priority", "5"])
            #expect(good.status == 0, "\(good.stderr)")
            #expect(good.stdout.hasPrefix("published ") && good.stdout.hasSuffix("with key \(bundle) (confirmed)\n"))
            let message = try await Self.take(tap, queue)
            let parsed = try JobParser.parse(body: message.body, bundleID: bundle, messageID: nil, defaultEnvironment: .production, transport: .http2).get()
            #expect(parsed.priority == 5)
            #expect(try await tap.get(queue: queue) == nil)
        }
        try await Self.withTap(exchange: TopologyNames.registry, kind: .fanout, routingKey: "") { tap, queue in
            let group = uniqueName("account")
            let register = ["registry", "register", "--url", url, "--bundle", "com.example.app", "--group", group, "--at", "5"]
            let bad = try await runProcess(workerExecutable, register + ["--token", "zz"])
            #expect(bad.status == 1 && bad.stderr.contains("nothing published: token: "), "\(bad.stderr)")
            let good = try await runProcess(workerExecutable, register + ["--token", Self.token])
            #expect(good.status == 0 && good.stdout == "published register to apns.registry (confirmed)\n", "\(good.stderr)")
            let parsed = try RegistrationMessage.parse(body: try await Self.take(tap, queue, containing: group).body).get()
            #expect(parsed == RegistrationMessage(op: .register, bundleID: "com.example.app", token: Self.token, group: group, at: 5))
        }
    }

    /// A one-shot command prints its answer alone on stdout: the AMQP client's info lines
    /// ("AMQP connected", "AMQP connection closed") only with `--verbose`, and then on stderr.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: workerExecutable)))
    func theCLIPrintsItsAnswerAlone() async throws {
        let url = try TestBroker.require().amqpURL
        let bundle = uniqueName("com.example.client")
        try await Self.withTap(exchange: TopologyNames.jobsExchange, kind: .direct, routingKey: bundle) { _, _ in
            let publish = ["publish", "--url", url, "--bundle", bundle, "--token", Self.token, "--alert", "Hi"]
            let quiet = try await runProcess(workerExecutable, publish)
            #expect(quiet.status == 0, "\(quiet.stderr)")
            #expect(quiet.stdout.hasPrefix("published ") && quiet.stdout.filter { $0 == "\n" }.count == 1, "\(quiet.stdout)")
            #expect(!quiet.stderr.contains("AMQP"), "\(quiet.stderr)")
            let verbose = try await runProcess(workerExecutable, publish + ["--verbose"])
            #expect(verbose.status == 0, "\(verbose.stderr)")
            #expect(verbose.stdout.hasPrefix("published ") && verbose.stdout.filter { $0 == "\n" }.count == 1, "\(verbose.stdout)")
            #expect(verbose.stderr.contains("AMQP connected") && verbose.stderr.contains("AMQP connection closed"), "\(verbose.stderr)")
        }
        try await Self.withTap(exchange: TopologyNames.registry, kind: .fanout, routingKey: "") { _, _ in
            let register = ["registry", "register", "--url", url, "--bundle", bundle, "--token", Self.token, "--group", uniqueName("account")]
            let registered = try await runProcess(workerExecutable, register)
            #expect(registered.status == 0 && registered.stdout == "published register to apns.registry (confirmed)\n", "\(registered.stdout)")
            #expect(!registered.stderr.contains("AMQP"), "\(registered.stderr)")
        }
        let fleet = try await runProcess(workerExecutable, ["fleet", "--url", url, "--wait", "500ms"])
        #expect(fleet.status == 0, "\(fleet.stderr)")
        #expect(fleet.stdout.hasSuffix("\n") && fleet.stdout.split(separator: "\n").last?.hasPrefix("instances: ") == true, "\(fleet.stdout)")
        #expect(!fleet.stdout.contains("AMQP") && !fleet.stderr.contains("AMQP"), "\(fleet.stdout)\(fleet.stderr)")
    }
}
