/// Broadcast push end to end (contract §7): a real broker, the `apns-worker run` executable and
/// the simulator playing both of Apple's services. A channel is created through the channel
/// management client, a broadcast job travels beside token jobs on the bundle's queue and
/// connections, and once the channel is deleted the next broadcast job becomes a feedback event
/// naming the channel.
import AMQPClient
import APNSChannelManagement
import APNSModel
import APNSSimulator
import APNSTopology
import APNSTopologyNames
import APNSTransport
import Foundation
import Testing
import TestSupport

@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts")) struct BroadcastEndToEndTests {
    func channelClient(_ h: WorkerHarness) throws -> ChannelManagementClient {
        let port: Int = try #require(h.simulator.channelPort)
        var configuration = ChannelManagementConfiguration(
            bundleID: h.bundle, environment: .production,
            authentication: .token(
                ProviderTokenSource(teamID: h.credentials.teamID, keyID: h.credentials.keyID, key: h.credentials.tokenPrivateKey)),
            host: "127.0.0.1", port: port)
        configuration.trustRoots = .caFile(h.credentials.caCertificatePath)
        return ChannelManagementClient(configuration: configuration)
    }

    func publishBroadcast(_ h: WorkerHarness, channel: BroadcastChannel, id: UUID = UUID(), content: String) async throws -> UUID {
        let body = #"{"channel":"\#(channel.id)","payload":{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"\#(content)"}}},"id":"\#(id.uuidString)"}"#
        try await h.publishRaw(Array(body.utf8), messageID: id.uuidString)
        return id
    }

    @Test func aBroadcastJobIsDeliveredBesideTokenJobsAndADeletedChannelBecomesAFeedbackEvent() async throws {
        var options = WorkerHarness.Options()
        options.channelManagement = true
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let client = try channelClient(h)

        let channel = try await client.create(storagePolicy: .mostRecentMessageStored)
        #expect(try await client.list() == [channel])
        #expect(try await client.read(channel) == .mostRecentMessageStored)

        let tokens = (0..<3).map { WorkerHarness.token(7_000 + $0) }
        try await h.publishJob(token: tokens[0])
        let broadcastID = try await publishBroadcast(h, channel: channel, content: "1-0")
        try await h.publishJob(token: tokens[1])
        try await h.publishJob(token: tokens[2])
        try await waitUntil("the broadcast and the three token jobs") {
            h.simulator.channels().first?.received == 1 && h.acceptedIDs().distinct.count == 4
        }
        let record = try #require(h.simulator.accepted().first { $0.channel != nil })
        #expect(record.channel == channel.id)
        #expect(record.apnsID.lowercased() == broadcastID.uuidString.lowercased())
        #expect(record.pushType == "liveactivity")
        #expect(record.token.isEmpty)
        #expect(String(decoding: record.payload, as: UTF8.self).contains(#""score":"1-0""#))
        #expect(Set(h.acceptedTokenCounts().keys.filter { !$0.isEmpty }) == Set(tokens))

        try await client.delete(channel)
        #expect(try await client.list().isEmpty)
        let lateID = try await publishBroadcast(h, channel: channel, content: "2-0")
        var events: [[String: Any]] = []
        try await waitUntil("the feedback event of the deleted channel") {
            for delivery in try await h.drain(h.feedbackQueue) {
                events.append(try #require(try JSONSerialization.jsonObject(with: Data(delivery.message.body)) as? [String: Any]))
            }
            return !events.isEmpty
        }
        #expect(events.count == 1)
        let event = try #require(events.first)
        #expect(event["channel"] as? String == channel.id)
        #expect(event["token"] == nil)
        #expect(event["reason"] as? String == "ChannelNotRegistered")
        #expect(event["jobId"] as? String == lateID.uuidString)
        #expect(event["bundleId"] as? String == h.bundle)
        #expect(h.simulator.counters().count(.channelNotRegistered) == 1)
        try await waitUntil("an empty work queue") { try await h.messageCount(h.workQueue) == 0 }
        #expect(try await h.messageCount(h.deadQueue) == 0)
        await h.shutdown()
    }

    @Test func malformedBroadcastJobsAreDeadWithoutCallingApple() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let both = #"{"token":"\#(WorkerHarness.token(1))","channel":"dHN0LXNyY2gtY2hubA==","payload":{"aps":{}}}"#
        let alert = #"{"channel":"dHN0LXNyY2gtY2hubA==","pushType":"alert","payload":{"aps":{}}}"#
        let control = "{\"channel\":\"dHN0\\r\\nX-Evil: 1\",\"payload\":{\"aps\":{}}}"
        for (index, body) in [both, alert, control].enumerated() {
            try await h.publishRaw(Array(body.utf8), messageID: "malformed-\(index)")
        }
        var dead: [AMQPDelivery] = []
        try await waitUntil("three dead letters") {
            dead += try await h.drain(h.deadQueue)
            return dead.count >= 3
        }
        for delivery in dead {
            #expect(delivery.message.properties.headers?[JobHeaders.reason]?.stringValue == "MalformedJob")
            #expect(delivery.message.properties.headers?[JobHeaders.status]?.intValue == 0)
        }
        #expect(Set(dead.map { String(decoding: $0.message.body, as: UTF8.self) }) == [both, alert, control])
        #expect(h.simulator.counters().received == 0)
        await h.shutdown()
    }
}
