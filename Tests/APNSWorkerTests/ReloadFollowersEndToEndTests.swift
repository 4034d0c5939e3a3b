import AMQPClient
import APNSBinaryProtocol
import APNSModel
import APNSSimulator
import APNSTopologyNames
import APNSWorker
import Foundation
import Testing
import TestSupport

/// Contract §3, "Changes while running", for what is built from the configuration beside the
/// bundle units: the binary bundles' feedback service pollers and the admin's broadcast channel
/// management. Through the real broker, the real `apns-worker` process and the simulator, which
/// serves each feedback tuple to the certificate of its app only (as Apple's service did), so the
/// test sees which certificate polled.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct ReloadFollowersEndToEndTests {
    // MARK: - Feedback service pollers

    @Test func feedbackPollersFollowABundleAddedGivenANewCertificateAndRemoved() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        options.extraCredentials = ["KEYROTATED", "KEYSTEADY0"]
        options.binaryHoldWindow = "200ms"
        options.feedbackService = true
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let (steady, b) = (h.bundles[0], h.bundles[1])
        let feedbackPort = try #require(h.simulator.feedbackPort)
        let binaryPort = try #require(h.simulator.binaryPort)
        func section(_ folder: String) -> String {
            """
            transport = binary
            certFile = \(folder)/client.pem
            keyFile = \(folder)/client.key
            binaryHoldWindow = 200ms
            feedbackInterval = 1s
            feedbackPort = \(feedbackPort)
            host = 127.0.0.1
            port = \(binaryPort)
            caFile = credentials/ca.pem
            connections = 1
            """
        }
        // The app each certificate names: the simulator serves a tuple to that app's polls only.
        let firstTopic = "com.example.app"
        let rotatedTopic = WorkerHarness.extraClientTopic("KEYROTATED")
        let steadyTopic = WorkerHarness.extraClientTopic("KEYSTEADY0")
        func polls(_ topic: String) -> Int { h.simulator.counters().feedbackConnectionsByTopic[topic] ?? 0 }
        let queue = uniqueName("e2e.feedback.b")
        _ = try await h.connection.declareQueue(QueueDeclaration(name: queue))
        try await h.connection.bind(BindingDeclaration(queue: queue, exchange: TopologyNames.feedbackExchange, routingKey: b))
        var eventsOfB: [String] = []
        func readEventsOfB() async throws {
            for delivery in try await h.drain(queue) {
                let event = try #require(try JSONSerialization.jsonObject(with: Data(delivery.message.body)) as? [String: Any])
                #expect(event["bundleId"] as? String == b)
                eventsOfB.append(try #require(event["token"] as? String))
            }
        }

        let config = ReloadEndToEndTests.Config(h: h)
        try config.write([(steady, section("credentials-KEYSTEADY0"))])
        let worker = try h.startWorker()
        defer { worker.kill9() }
        try await waitUntil("the steady bundle's poller") { polls(steadyTopic) >= 1 }

        // Added: its poller starts, with its certificate.
        let (addedToken, rotatedToken, staleToken, lateToken) = (WorkerHarness.token(1), WorkerHarness.token(2), WorkerHarness.token(3), WorkerHarness.token(4))
        h.simulator.addFeedback(token: addedToken, timestamp: 1_700_000_001, topic: firstTopic)
        try config.write([(steady, section("credentials-KEYSTEADY0")), (b, section("credentials"))])
        worker.signal(SIGHUP)
        try await ReloadEndToEndTests.waitForApplied(worker, count: 1, containing: "added [apns \"\(b)\"]")
        try await waitUntil("the added bundle's feedback event", timeout: .seconds(60)) {
            try await readEventsOfB()
            return eventsOfB.contains(addedToken)
        }

        // A new certificate (another app's, so the simulator tells them apart): a new poller on a
        // new client; the old one ended before the change was applied.
        h.simulator.addFeedback(token: rotatedToken, timestamp: 1_700_000_002, topic: rotatedTopic)
        try config.write([(steady, section("credentials-KEYSTEADY0")), (b, section("credentials-KEYROTATED"))])
        worker.signal(SIGHUP)
        try await ReloadEndToEndTests.waitForApplied(worker, count: 2, containing: "[apns \"\(b)\"] certFile, keyFile")
        let firstCertificatePolls = polls(firstTopic)
        try await waitUntil("the event fetched with the new certificate", timeout: .seconds(60)) {
            try await readEventsOfB()
            return eventsOfB.contains(rotatedToken)
        }
        // The old certificate polls no more: a tuple for its app waits while the steady poller,
        // polling as often, polls three more times.
        h.simulator.addFeedback(token: staleToken, timestamp: 1_700_000_003, topic: firstTopic)
        var steadyPolls = polls(steadyTopic)
        try await waitUntil("three more polls of the steady bundle") { polls(steadyTopic) >= steadyPolls + 3 }
        #expect(polls(firstTopic) == firstCertificatePolls, "the old certificate's poller stopped")

        // Removed: its poller stops.
        try config.write([(steady, section("credentials-KEYSTEADY0"))])
        worker.signal(SIGHUP)
        try await ReloadEndToEndTests.waitForApplied(worker, count: 3, containing: "removed [apns \"\(b)\"]")
        let rotatedPolls = polls(rotatedTopic)
        h.simulator.addFeedback(token: lateToken, timestamp: 1_700_000_004, topic: rotatedTopic)
        steadyPolls = polls(steadyTopic)
        try await waitUntil("three more polls of the steady bundle") { polls(steadyTopic) >= steadyPolls + 3 }
        #expect(polls(rotatedTopic) == rotatedPolls, "the removed bundle's poller stopped")

        try await readEventsOfB()
        #expect(eventsOfB.sorted() == [addedToken, rotatedToken].sorted(), "each served tuple published once, none after the bundle left")
        let pending = Set(h.simulator.pendingFeedback().map { DeviceToken(bytes: $0.deviceToken).hex.lowercased() })
        #expect(pending == [staleToken, lateToken])
        #expect(ReloadEndToEndTests.occurrences("feedback service pollers follow the configuration change", in: worker.log) == 3)
        _ = try? await h.connection.deleteQueue(queue)
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(20)) == 0)
        await h.shutdown()
    }

    // MARK: - Broadcast channel management

    @Test func channelManagementFollowsABundleAddedAndRemovedAndChecksTheKeysScope() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        options.channelManagement = true
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let (a, b) = (h.bundles[0], h.bundles[1])
        let channelPort = try #require(h.simulator.channelPort)
        let config = ReloadEndToEndTests.Config(h: h)
        // A production-only team key: what the sandbox would refuse is never sent.
        let section = config.tokenSection() + "\nkeyEnvironment = production\nchannelHost = 127.0.0.1\nchannelPort = \(channelPort)"
        try config.write([(a, section)])
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let port = try await FleetEndToEndTests.adminPort(worker)
        func channelRequests() -> Int { h.simulator.counters().channelRequests }

        let unknown = try await FleetEndToEndTests.http("POST", port, "/api/bundles/\(b)/channels")
        #expect(unknown.status == 404, "\(unknown.body)")

        // Added: its channels can be managed.
        try config.write([(a, section), (b, section)])
        worker.signal(SIGHUP)
        try await ReloadEndToEndTests.waitForApplied(worker, count: 1, containing: "added [apns \"\(b)\"]")
        let created = try await FleetEndToEndTests.http("POST", port, "/api/bundles/\(b)/channels")
        #expect(created.status == 201, "\(created.body)")
        let channel = try #require(
            (try JSONSerialization.jsonObject(with: Data(created.body.utf8)) as? [String: Any])?["channel"] as? String)
        #expect(h.simulator.channels().map(\.bundleID) == [b])
        #expect(h.simulator.channels().map(\.id) == [channel])
        let listed = try await FleetEndToEndTests.http("GET", port, "/api/bundles/\(b)/channels")
        #expect(listed.status == 200)
        #expect(listed.body.contains(channel))

        // Outside the key's scope: Apple's refusal, without a trip to Apple.
        let requestsBefore = channelRequests()
        let sandbox = try await FleetEndToEndTests.http("GET", port, "/api/bundles/\(b)/channels?environment=sandbox")
        #expect(sandbox.status == 502, "\(sandbox.body)")
        #expect(sandbox.body.contains("BadEnvironmentKeyInToken"))
        #expect(sandbox.body.contains("not sent to Apple"))
        #expect(channelRequests() == requestsBefore)

        // Removed: its channels are no longer the worker's to manage; the other bundle's are.
        try config.write([(a, section)])
        worker.signal(SIGHUP)
        try await ReloadEndToEndTests.waitForApplied(worker, count: 2, containing: "removed [apns \"\(b)\"]")
        let escaped = try #require(channel.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
        let removed = try await FleetEndToEndTests.http("DELETE", port, "/api/bundles/\(b)/channels/\(escaped)")
        #expect(removed.status == 404, "\(removed.body)")
        #expect(channelRequests() == requestsBefore)
        #expect(h.simulator.channels().map(\.id) == [channel])
        let other = try await FleetEndToEndTests.http("GET", port, "/api/bundles/\(a)/channels")
        #expect(other.status == 200, "\(other.body)")
        #expect(ReloadEndToEndTests.occurrences("broadcast channel management follows the configuration change", in: worker.log) == 2)
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(20)) == 0)
        await h.shutdown()
    }
}
