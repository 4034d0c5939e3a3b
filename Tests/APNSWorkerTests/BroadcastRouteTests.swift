/// Broadcast jobs in the worker (contract §7): Apple's channel reasons become a feedback event
/// naming the channel, and the registry's invalid-token marks never see a channel.
import AMQPClient
import APNSModel
import APNSOutcome
import APNSTopologyNames
import Foundation
import Synchronization
import TestSupport
import Testing

@testable import APNSWorker

@Suite struct BroadcastRouteTests {
    static let channel = "dHN0LXNyY2gtY2hubA=="

    /// Records what the pipeline tells the registry.
    final class RecordingObserver: JobEndObserver {
        let ends = Mutex<[JobEnd]>([])
        let invalidTokens = Mutex<[String]>([])
        func jobEnded(bundleID: String, end: JobEnd) { ends.withLock { $0.append(end) } }
        func tokenInvalid(bundleID: String, token: DeviceToken, reason: String, timestamp: Int64?) {
            invalidTokens.withLock { $0.append(token.hex) }
        }
    }

    @Test func aChannelReasonIsAFeedbackEventWithTheChannelInPlaceOfTheToken() throws {
        let router = OutcomeRouter(bundleID: "com.example.app", retryPolicy: .standard)
        let body = #"{"channel":"\#(Self.channel)","payload":{"aps":{}}}"#
        let job = try JobParser.parse(
            body: Array(body.utf8), bundleID: "com.example.app", messageID: nil, defaultEnvironment: .production, transport: .http2
        ).get()
        let message = AMQPDeliveredMessage(
            exchange: "apns.jobs", routingKey: "com.example.app", redelivered: false, body: Array(body.utf8),
            properties: .persistentJSON)
        let context = OutcomeRouter.JobContext(message: message, job: job, previousAttempts: 0)
        #expect(context.token == nil)
        let route = router.route(.invalidToken(reason: "ChannelNotRegistered", timestamp: nil), job: context, now: Date())
        guard case .publishThenAck(let event, let end) = route else {
            Issue.record("expected a publish")
            return
        }
        #expect(end == .invalidToken)
        #expect(event.exchange == TopologyNames.feedbackExchange)
        #expect(
            String(decoding: event.body, as: UTF8.self)
                == #"{"bundleId":"com.example.app","channel":"\#(Self.channel)","jobId":"\#(job.id.uuidString)","reason":"ChannelNotRegistered","timestamp":null}"#
        )
    }

    @Test func theRegistryIsNotToldAboutAChannel() async throws {
        let observer = RecordingObserver()
        let answer = TransportResult.http(HTTPAnswer(status: 404, reason: .channelNotRegistered))
        let rig = BundlePipelineTests.Rig(answer: answer, observer: observer)
        try await rig.running { _ in
            rig.broker.enqueue(
                body: Array(#"{"channel":"\#(Self.channel)","payload":{"aps":{}},"id":"\#(UUID().uuidString)"}"#.utf8),
                redelivered: false, headers: nil)
            try await waitUntil("the broadcast job acked") { rig.broker.snapshot.acked.count == 1 }
        }
        #expect(observer.ends.withLock { $0 } == [.invalidToken])
        #expect(observer.invalidTokens.withLock { $0 }.isEmpty)
        let published = rig.broker.snapshot.published
        #expect(published.count == 1)
        let event = try #require(published.first.flatMap { try JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any] })
        #expect(event["channel"] as? String == Self.channel)
        #expect(event["token"] == nil)
    }

    @Test func aTokenJobStillMarksItsToken() async throws {
        let observer = RecordingObserver()
        let rig = BundlePipelineTests.Rig(answer: ScriptedTransport.unregistered, observer: observer)
        try await rig.running { _ in
            rig.enqueueJob()
            try await waitUntil("the token job acked") { rig.broker.snapshot.acked.count == 1 }
        }
        #expect(observer.invalidTokens.withLock { $0 } == [BundlePipelineTests.token])
    }
}
