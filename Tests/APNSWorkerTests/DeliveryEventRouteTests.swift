/// Delivery events as the router builds them (contract §8), with no broker: which end produces
/// one at which level, and the facts each carries, from Apple's answer or the dead letter.
import AMQPClient
import APNSModel
import APNSOutcome
import APNSTopologyNames
import Foundation
import TestSupport
import Testing

@testable import APNSWorker

@Suite struct DeliveryEventRouteTests {
    static let bundle = "com.example.app"
    static let token = String(repeating: "0c", count: 32)
    static let jobID = "5E2D0C8B-7E4B-4C8A-9A51-6C0E8C7B7D11"
    static let now = Date(timeIntervalSince1970: 1_700_000_000)
    let router = OutcomeRouter(bundleID: Self.bundle, retryPolicy: RetryPolicy(delays: [.seconds(10)], maxAttempts: 2), events: .ends)

    static func parsed(_ extra: String = "", target: String = #""token":"\#(token)""#) throws -> (Job, OutcomeRouter.JobContext) {
        let body = #"{\#(target),"payload":{"aps":{"alert":"hi"}},"id":"\#(jobID)"\#(extra)}"#
        let job = try JobParser.parse(
            body: Array(body.utf8), bundleID: bundle, messageID: nil, defaultEnvironment: .production, transport: .http2
        ).get()
        let message = AMQPDeliveredMessage(
            exchange: "apns.jobs", routingKey: bundle, redelivered: false, body: Array(body.utf8), properties: .persistentJSON)
        return (job, OutcomeRouter.JobContext(message: message, job: job, previousAttempts: 0))
    }

    /// Apple's answer through the worker's own classifier and router, as `BundlePipeline.answered` does.
    func answered(_ result: TransportResult, _ job: Job, _ context: OutcomeRouter.JobContext) -> (JobEnd, [String: Any]?) {
        let outcome = OutcomeClassifier.classify(result)
        let route = router.route(outcome, job: context, now: Self.now)
        let facts = OutcomeRouter.answeredFacts(result, outcome: outcome, end: route.end, job: job, attempts: context.previousAttempts + 1)
        let message = router.event(end: route.end, level: router.eventLevel(of: job), job: context, facts: facts, now: Self.now)
        return (route.end, message.map(Self.checked))
    }

    /// The message's envelope as contract §8 fixes it; its body as JSON.
    static func checked(_ message: AMQPOutboundMessage) -> [String: Any] {
        ContractCapture.record(message)
        let json = (try? JSONSerialization.jsonObject(with: Data(message.body))) as? [String: Any] ?? [:]
        let end = json["end"] as? String ?? "?"
        #expect(message.exchange == TopologyNames.eventsExchange)
        #expect(message.routingKey == "\(bundle).\(end)")
        #expect(message.properties.messageID == "\(json["jobId"] as? String ?? "?").\(end).\((json["attempts"] as? NSNumber)?.intValue ?? -1)")
        #expect(message.properties.deliveryMode == 2)
        #expect(message.properties.contentType == "application/json")
        #expect(!message.mandatory, "an event nobody bound a queue for must not hold its job")
        return json
    }

    @Test func aDeliveredJobsEventCarriesApplesIDsAndTheJobsFacts() throws {
        let (job, context) = try Self.parsed(#","environment":"sandbox","userInfo":{"groupJobId":"0b6c3a52-3c1e-5f4e-9b0d-2a7e8f1c4d21"}"#)
        let apnsID = UUID()
        let (end, json) = answered(.http(HTTPAnswer(status: 200, apnsID: apnsID, uniqueID: "u-1")), job, context)
        let event = try #require(json)
        #expect(end == .delivered)
        #expect(event["end"] as? String == "delivered")
        #expect(event["jobId"] as? String == Self.jobID)
        #expect(event["bundleId"] as? String == Self.bundle)
        #expect(event["reason"] is NSNull)
        #expect((event["status"] as? NSNumber)?.intValue == 200)
        #expect(event["apnsId"] as? String == apnsID.uuidString.lowercased())
        #expect(event["apnsUniqueId"] as? String == "u-1")
        #expect((event["attempts"] as? NSNumber)?.intValue == 1)
        #expect(event["at"] as? String == "2023-11-14T22:13:20Z")
        #expect(event["token"] as? String == Self.token)
        #expect(event["environment"] as? String == "sandbox")
        #expect(event["groupJobId"] as? String == "0b6c3a52-3c1e-5f4e-9b0d-2a7e8f1c4d21")
    }

    @Test func anInvalidTokenADeadAnswerAndExhaustedRetriesEachHaveTheirReasonAndStatus() throws {
        let (job, context) = try Self.parsed()
        let gone = answered(.http(HTTPAnswer(status: 410, reason: .unregistered, timestamp: 1)), job, context)
        #expect(gone.0 == .invalidToken)
        #expect(gone.1?["reason"] as? String == "Unregistered")
        #expect((gone.1?["status"] as? NSNumber)?.intValue == 410)
        let dead = answered(.http(HTTPAnswer(status: 400, reason: .badExpirationDate)), job, context)
        #expect(dead.0 == .dead)
        #expect(dead.1?["reason"] as? String == "BadExpirationDate")
        #expect((dead.1?["status"] as? NSNumber)?.intValue == 400)
        // maxAttempts 2: the second 503 leaves no attempt.
        let second = OutcomeRouter.JobContext(message: context.message, job: job, previousAttempts: 1)
        let exhausted = answered(.http(HTTPAnswer(status: 503, reason: .serviceUnavailable)), job, second)
        #expect(exhausted.0 == .dead)
        #expect(exhausted.1?["reason"] as? String == OutcomeRouter.retriesExhausted)
        #expect((exhausted.1?["status"] as? NSNumber)?.intValue == 503)
        #expect((exhausted.1?["attempts"] as? NSNumber)?.intValue == 2)
    }

    @Test func aRetryHasAnEventUnderAllOnlyAndAHeldJobNone() throws {
        let (job, context) = try Self.parsed()
        let retry = answered(.http(HTTPAnswer(status: 503, reason: .serviceUnavailable)), job, context)
        #expect(retry.0 == .retry)
        #expect(retry.1 == nil, "ends: no event for a retry")
        let (jobAll, contextAll) = try Self.parsed(#","events":"all""#)
        let retried = try #require(answered(.failed(.timeout), jobAll, contextAll).1)
        #expect(retried["end"] as? String == "retried")
        #expect(retried["reason"] as? String == "Timeout")
        #expect((retried["status"] as? NSNumber)?.intValue == 0)
        #expect((retried["attempts"] as? NSNumber)?.intValue == 1)
        let held = answered(.http(HTTPAnswer(status: 403, reason: .invalidProviderToken)), jobAll, contextAll)
        #expect(held.0 == .held)
        #expect(held.1 == nil, "held is no end")
    }

    @Test func theJobsLevelWinsOverTheBundles() throws {
        let (quiet, quietContext) = try Self.parsed(#","events":"none""#)
        #expect(answered(.http(HTTPAnswer(status: 200)), quiet, quietContext).1 == nil)
        let none = OutcomeRouter(bundleID: Self.bundle, retryPolicy: .standard)
        let (asking, _) = try Self.parsed(#","events":"ends""#)
        let (silent, _) = try Self.parsed()
        #expect(none.eventLevel(of: asking) == .ends)
        #expect(none.eventLevel(of: silent) == .none)
        #expect(none.eventLevel(of: nil) == .none)
    }

    @Test func binaryStatusCodesAreTheEventsStatus() throws {
        let (job, context) = try Self.parsed()
        let accepted = answered(.binaryAccepted, job, context)
        #expect((accepted.1?["status"] as? NSNumber)?.intValue == 0)
        #expect(accepted.1?["apnsId"] is NSNull)
        let invalid = answered(.binaryRejected(status: 8), job, context)
        #expect(invalid.0 == .invalidToken)
        #expect((invalid.1?["status"] as? NSNumber)?.intValue == 8)
    }

    @Test func aBroadcastsEventNamesTheChannel() throws {
        let (job, context) = try Self.parsed(target: #""channel":"dHN0LXNyY2gtY2hubA==""#)
        let event = try #require(answered(.http(HTTPAnswer(status: 400, reason: .badChannelId)), job, context).1)
        #expect(event["channel"] as? String == "dHN0LXNyY2gtY2hubA==")
        #expect(event["token"] == nil)
        #expect(event["end"] as? String == "invalidToken")
    }

    /// A job settled unsent has the facts its dead letter has: the worker's reason, status 0, the
    /// attempts of its headers.
    @Test func anUnsentJobsEventSaysWhatItsDeadLetterSays() throws {
        let message = AMQPDeliveredMessage(
            exchange: "apns.jobs", routingKey: Self.bundle, redelivered: false, body: Array("not json".utf8),
            properties: .persistentJSON)
        let context = OutcomeRouter.JobContext(message: message, jobID: Self.jobID, token: nil, previousAttempts: 2)
        for (route, reason) in [
            (router.routeMalformed(job: context, reason: "MalformedJob", detail: "body: invalid JSON", now: Self.now), "MalformedJob"),
            (router.routeDeliveryLimitExceeded(job: context, deliveries: 21, maxDeliveries: 20, now: Self.now), "DeliveryLimitExceeded"),
        ] {
            let facts = OutcomeRouter.unsentFacts(route, environment: .sandbox)
            let event = Self.checked(try #require(router.event(end: route.end, level: .ends, job: context, facts: facts, now: Self.now)))
            #expect(event["reason"] as? String == reason)
            #expect((event["status"] as? NSNumber)?.intValue == 0)
            #expect((event["attempts"] as? NSNumber)?.intValue == 2)
            #expect(event["environment"] as? String == "sandbox")
            #expect(event["token"] as? String == "")
        }
        let oversized = OutcomeRouter.unsentFacts(router.routeOversized(copied: true), environment: .production)
        #expect(oversized.reason == "MalformedJob" && oversized.status == 0 && oversized.attempts == 0)
        #expect(OutcomeRouter.unsentFacts(.rejectToDeadLetter, environment: .production).reason == "MessageTooLarge")
        let gated = router.routeGated(job: context)
        #expect(router.event(end: gated.end, level: .all, job: context, facts: oversized, now: Self.now) == nil, "gated is no end")
    }
}
