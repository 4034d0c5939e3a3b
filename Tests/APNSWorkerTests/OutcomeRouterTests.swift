import AMQPClient
import APNSBinaryProtocol
import APNSModel
import APNSOutcome
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

@testable import APNSWorker

@Suite struct OutcomeRouterTests {
    let bundle = "com.example.app"
    let router = OutcomeRouter(bundleID: "com.example.app", retryPolicy: .standard)
    let now = Date(timeIntervalSince1970: 1_700_000_000)

    static let jobID = UUID(uuidString: "5E2D0C8B-7E4B-4C8A-9A51-6C0E8C7B7D11")!

    /// A parsed job whose id the parser generated (`message_id` "m-1" is no UUID), unless
    /// `generated` is false (the id came with the job).
    func job(
        attempt: Int32? = nil, extraHeaders: AMQPTable = [:], messageID: AMQPShortString? = "m-1", generated: Bool = true
    ) -> OutcomeRouter.JobContext {
        var headers = extraHeaders
        if let attempt { headers[JobHeaders.attempt] = .int32(attempt) }
        var props = AMQPProperties(
            contentType: "application/json", headers: headers.isEmpty ? nil : headers, deliveryMode: 2, appID: "sync")
        props.setShortString(.messageID, messageID)
        let message = AMQPDeliveredMessage(
            exchange: "apns.jobs", routingKey: bundle, redelivered: false, body: Array(#"{"token":"ab"}"#.utf8),
            properties: props)
        var parsed = Job(
            id: Self.jobID, bundleID: bundle, target: .device(DeviceToken(hex: "abcd")!), payload: [], pushType: .alert,
            priority: 10, expiration: nil, collapseID: nil, environment: .production, userInfo: [:])
        parsed.idGenerated = generated
        return .init(message: message, job: parsed, previousAttempts: OutcomeRouter.JobContext.previousAttempts(in: message))
    }

    /// Every route that carries the job on (retry, dead letter, held copy, gated).
    func copies(of job: OutcomeRouter.JobContext) -> [AMQPOutboundMessage] {
        let routes = [
            router.route(.retry(reason: "ServiceUnavailable", status: 503), job: job, now: now),
            router.route(.dead(reason: "BadPriority", status: 400, detail: "x"), job: job, now: now),
            router.route(.held(reason: "InvalidProviderToken", status: 403), job: job, now: now),
            router.routeGated(job: job),
            router.routeDeliveryLimitExceeded(job: job, deliveries: 21, maxDeliveries: 20, now: now),
        ]
        return routes.compactMap { route in
            guard case .publishThenAck(let message, _) = route else { return nil }
            return message
        } + [router.handedBack(job.message)]
    }

    /// Contract §2 and §4: only an id the parser generated travels as a copy's `message_id`; one
    /// that came with the job (its body's `id`, its `message_id` in any case, or bytes that are
    /// not UTF-8) leaves `message_id` byte for byte as it arrived, absent if it was.
    @Test func aCopyKeepsTheMessageIDItArrivedWithUnlessItsIDWasGenerated() {
        let lower: AMQPShortString = "77b3b4c2-0d6e-4e0a-9d1c-2b1a0c9e8f7d"
        let notUTF8 = AMQPShortString(bytes: [0xFF, 0x41, 0xC3])
        for arrived in [lower, notUTF8, nil] {
            let copies = copies(of: job(messageID: arrived, generated: false))
            #expect(copies.count == 6)
            for copy in copies {
                #expect(copy.properties.shortString(.messageID) == arrived, "\(copy.routingKey)")
            }
        }
        // Generated: the copies carry it, so every attempt has the same id.
        for copy in copies(of: job(messageID: notUTF8, generated: true)).dropLast() {
            #expect(copy.properties.messageID == Self.jobID.uuidString, "\(copy.routingKey)")
        }
    }

    /// A job handed back unsent: its held copy, to the end of its work queue, without the
    /// broker's delivery count; nothing else changes.
    @Test func aHandedBackJobIsItsHeldCopyWithoutTheBrokersCount() {
        let original = job(attempt: 2, extraHeaders: [JobHeaders.deliveryCount: .int64(3), "trace": .string("t-1")])
        let copy = router.handedBack(original.message)
        #expect(copy.exchange == "" && copy.routingKey == "apns.com.example.app")
        #expect(copy.body == original.message.body)
        #expect(copy.properties.headers == [JobHeaders.attempt: .int32(2), "trace": .string("t-1")])
        #expect(copy.properties.messageID == "m-1")
    }

    @Test func deliveredIsAPlainAck() {
        #expect(router.route(.delivered, job: job(), now: now) == .ack(end: .delivered))
    }

    /// A job too large ends `dead` whichever way it goes: acked after its body was copied to the
    /// dead queue, or rejected for the broker to dead-letter. The route says so; nobody pairs a
    /// bare ack with an end of their own.
    @Test func anOversizedJobsRouteCarriesTheDeadEnd() {
        #expect(router.routeOversized(copied: true) == .ack(end: .dead))
        #expect(router.routeOversized(copied: true).end == .dead)
        #expect(router.routeOversized(copied: false) == .rejectToDeadLetter)
        #expect(router.routeOversized(copied: false).end == .dead)
    }

    @Test func invalidTokenPublishesFeedbackWithApplesTimestamp() throws {
        let route = router.route(.invalidToken(reason: "Unregistered", timestamp: 1_699_999_999_123), job: job(), now: now)
        guard case .publishThenAck(let message, let end) = route else { Issue.record("expected a publish"); return }
        ContractCapture.record(message)
        #expect(end == .invalidToken)
        #expect(message.exchange == "apns.feedback")
        #expect(message.routingKey == bundle)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(message.body)) as? [String: Any])
        #expect(json["bundleId"] as? String == bundle)
        #expect(json["token"] as? String == "abcd")
        #expect(json["reason"] as? String == "Unregistered")
        #expect((json["timestamp"] as? NSNumber)?.int64Value == 1_699_999_999_123)
        #expect(json["jobId"] as? String == "5E2D0C8B-7E4B-4C8A-9A51-6C0E8C7B7D11")
    }

    @Test func feedbackServiceTupleIsUnregisteredWithItsTimeInMillisecondsAndNoJob() throws {
        let tuple = FeedbackTuple(timestamp: 1_700_000_000, deviceToken: Array(repeating: 0xAB, count: 32))
        let message = OutcomeRouter.feedbackServiceEvent(bundleID: bundle, tuple)
        ContractCapture.record(message)
        #expect(message.exchange == "apns.feedback")
        #expect(message.routingKey == bundle)
        #expect(message.mandatory)
        #expect(message.properties.deliveryMode == 2)
        #expect(message.properties.messageID == nil)
        #expect(
            String(decoding: message.body, as: UTF8.self)
                == #"{"bundleId":"com.example.app","jobId":null,"reason":"Unregistered","timestamp":1700000000000,"token":""#
                + String(repeating: "ab", count: 32) + #""}"#)
    }

    @Test func binaryInvalidTokenHasNullTimestamp() throws {
        let route = router.route(.invalidToken(reason: "InvalidToken", timestamp: nil), job: job(), now: now)
        guard case .publishThenAck(let message, _) = route else { Issue.record("expected a publish"); return }
        ContractCapture.record(message)
        let text = String(decoding: message.body, as: UTF8.self)
        #expect(text.contains(#""timestamp":null"#))
    }

    @Test(arguments: [
        (nil as Int32?, "apns.com.example.app.retry.10s", Int32(1)),
        (1, "apns.com.example.app.retry.1m", 2),
        (2, "apns.com.example.app.retry.5m", 3),
        (3, "apns.com.example.app.retry.15m", 4),
        (4, "apns.com.example.app.retry.15m", 5),
    ])
    func retryGoesToTheQueueOfTheNextDelay(previous: Int32?, queue: String, attempt: Int32) {
        let route = router.route(.retry(reason: "ServiceUnavailable", status: 503), job: job(attempt: previous), now: now)
        guard case .publishThenAck(let message, let end) = route else { Issue.record("expected a publish"); return }
        ContractCapture.record(message)
        #expect(end == .retry)
        #expect(message.exchange == "")
        #expect(message.routingKey == queue)
        #expect(message.properties.headers?[JobHeaders.attempt] == .int32(attempt))
        #expect(message.body == job().message.body)
        // The job's id, generated when the publisher gave none that is a UUID, stays the same
        // for every attempt: it travels as the retry message's message_id.
        #expect(message.properties.messageID == Self.jobID.uuidString)
        #expect(message.properties.appID == "sync")
    }

    @Test func retriesExhaustedAfterMaxAttempts() {
        let route = router.route(.retry(reason: "InternalServerError", status: 500), job: job(attempt: 5), now: now)
        guard case .publishThenAck(let message, let end) = route else { Issue.record("expected a publish"); return }
        ContractCapture.record(message)
        #expect(end == .dead)
        #expect(message.routingKey == "apns.com.example.app.dead")
        let headers = message.properties.headers ?? [:]
        #expect(headers[JobHeaders.reason] == .string("RetriesExhausted"))
        #expect(headers[JobHeaders.status] == .int32(500))
        #expect(headers[JobHeaders.attempts] == .int32(6))
        #expect(headers[JobHeaders.failedAt] == .string("2023-11-14T22:13:20Z"))
        #expect(headers[JobHeaders.error]?.stringValue?.contains("6 attempts") == true)
    }

    @Test func deadKeepsBodyAndPropertiesAndAddsHeaders() {
        let original = job(extraHeaders: ["trace": .string("t-1")])
        let route = router.route(.dead(reason: "PayloadTooLarge", status: 413, detail: "payload\nis 5000 bytes"), job: original, now: now)
        guard case .publishThenAck(let message, _) = route else { Issue.record("expected a publish"); return }
        ContractCapture.record(message)
        #expect(message.body == original.message.body)
        var expected = original.message.properties
        expected.headers = message.properties.headers
        expected.messageID = original.jobID
        #expect(message.properties == expected)
        let headers = message.properties.headers ?? [:]
        #expect(headers["trace"] == .string("t-1"))
        #expect(headers[JobHeaders.reason] == .string("PayloadTooLarge"))
        #expect(headers[JobHeaders.status] == .int32(413))
        #expect(headers[JobHeaders.attempts] == .int32(1))
        #expect(headers[JobHeaders.error] == .string("payload is 5000 bytes"))
    }

    @Test func malformedIsDeadWithStatusZero() {
        let route = router.routeMalformed(job: job(), reason: "MalformedJob", detail: "token: not hexadecimal", now: now)
        guard case .publishThenAck(let message, _) = route else { Issue.record("expected a publish"); return }
        ContractCapture.record(message)
        #expect(message.properties.headers?[JobHeaders.status] == .int32(0))
        #expect(message.properties.headers?[JobHeaders.attempts] == .int32(0))
        #expect(message.properties.headers?[JobHeaders.reason] == .string("MalformedJob"))
    }

    /// A held job goes back to the end of its work queue as a new message (a nack would count as
    /// a delivery towards maxDeliveries on quorum queues), unchanged but for its job id and
    /// without the broker's delivery count.
    @Test(arguments: ["InvalidProviderToken", "ExpiredProviderToken"])
    func heldJobsGoBackToTheirWorkQueue(reason: String) {
        let original = job(attempt: 2, extraHeaders: [JobHeaders.deliveryCount: .int64(3), "trace": .string("t-1")])
        let route = router.route(.held(reason: reason, status: 403), job: original, now: now)
        guard case .publishThenAck(let message, let end) = route else { Issue.record("expected a publish"); return }
        ContractCapture.record(message)
        #expect(end == .held)
        #expect(message.exchange == "" && message.routingKey == "apns.com.example.app")
        #expect(message.body == original.message.body)
        #expect(message.properties.headers == [JobHeaders.attempt: .int32(2), "trace": .string("t-1")])
        #expect(message.properties.messageID == original.jobID)
    }

    @Test func retryAndDeadMessagesCarryNoDeliveryCount() {
        let original = job(extraHeaders: [JobHeaders.deliveryCount: .int64(7)])
        for outcome in [Outcome.retry(reason: "InternalServerError", status: 500), .dead(reason: "BadPriority", status: 400, detail: "x")] {
            guard case .publishThenAck(let message, _) = router.route(outcome, job: original, now: now) else {
                Issue.record("expected a publish"); return
            }
            ContractCapture.record(message)
            #expect(message.properties.headers?[JobHeaders.deliveryCount] == nil)
        }
    }

    @Test func deliveryLimitExceededIsDeadUnread() {
        let route = router.routeDeliveryLimitExceeded(job: job(attempt: 1), deliveries: 21, maxDeliveries: 20, now: now)
        guard case .publishThenAck(let message, let end) = route else { Issue.record("expected a publish"); return }
        ContractCapture.record(message)
        #expect(end == .dead)
        #expect(message.routingKey == "apns.com.example.app.dead")
        let headers = message.properties.headers ?? [:]
        #expect(headers[JobHeaders.reason] == .string("DeliveryLimitExceeded"))
        #expect(headers[JobHeaders.status] == .int32(0))
        #expect(headers[JobHeaders.attempts] == .int32(1))
        #expect(headers[JobHeaders.error]?.stringValue?.contains("delivered 21 times") == true)
        #expect(message.body == job().message.body)
    }

    @Test func gatedJobsWaitInTheFirstRetryQueueWithoutSpendingAnAttempt() {
        guard case .publishThenAck(let message, let end) = router.routeGated(job: job(attempt: 2)) else {
            Issue.record("expected a publish"); return
        }
        ContractCapture.record(message)
        #expect(end == .gated)
        #expect(message.routingKey == "apns.com.example.app.retry.10s")
        #expect(message.properties.headers?[JobHeaders.attempt] == .int32(2))
    }

    /// What docs/schemas/ once refused: a job dead before any attempt says 0 attempts,
    /// and a job the gate sends back before its first attempt carries `x-apns-attempt` 0.
    @Test func messagesAboutAJobNeverSentCountNoAttempt() {
        let fresh = job()
        let deadRoutes = [
            router.routeMalformed(job: fresh, reason: "MalformedJob", detail: "collapseId: is 80 bytes; at most 64", now: now),
            router.routeDeliveryLimitExceeded(job: fresh, deliveries: 21, maxDeliveries: 20, now: now),
        ]
        for route in deadRoutes {
            guard case .publishThenAck(let message, let end) = route else { Issue.record("expected a publish"); return }
            ContractCapture.record(message)
            #expect(end == .dead)
            #expect(message.properties.headers?[JobHeaders.attempts] == .int32(0))
            #expect(message.properties.headers?[JobHeaders.status] == .int32(0))
        }
        guard case .publishThenAck(let gated, let end) = router.routeGated(job: fresh) else { Issue.record("expected a publish"); return }
        ContractCapture.record(gated)
        #expect(end == .gated)
        #expect(gated.properties.headers?[JobHeaders.attempt] == .int32(0))
    }

    @Test func attemptHeaderToleratesOtherEncodings() {
        #expect(job(extraHeaders: [JobHeaders.attempt: .string("3")]).previousAttempts == 3)
        #expect(job(extraHeaders: [JobHeaders.attempt: .int64(4)]).previousAttempts == 4)
        #expect(job(extraHeaders: [JobHeaders.attempt: .string("x")]).previousAttempts == 0)
        #expect(job(extraHeaders: [JobHeaders.attempt: .int32(-2)]).previousAttempts == 0)
    }

    /// 2^63−1 in `x-apns-attempt` once trapped on counting this attempt. Not a count
    /// in 0...2^31−1: absent, so this is the first attempt.
    @Test(arguments: [Int64.max, Int64(Int32.max) + 1])
    func anOutOfRangeAttemptCountsAsAbsent(value: Int64) {
        let hostile = job(extraHeaders: [JobHeaders.attempt: .int64(value)])
        #expect(hostile.previousAttempts == 0)
        for outcome in [Outcome.retry(reason: "InternalServerError", status: 500), .dead(reason: "BadPriority", status: 400, detail: "x"), .delivered] {
            let route = router.route(outcome, job: hostile, now: now)
            guard case .publishThenAck(let message, _) = route else { continue }
            ContractCapture.record(message)
            let headers = message.properties.headers ?? [:]
            #expect(headers[JobHeaders.attempt] == .int32(1) || headers[JobHeaders.attempts] == .int32(1))
        }
    }

    /// The largest valid count still routes: the next attempt is clamped, never wraps.
    @Test func theLargestValidAttemptRoutesWithoutOverflow() {
        let context = OutcomeRouter.JobContext(message: job().message, jobID: nil, token: nil, previousAttempts: Int.max)
        #expect(context.previousAttempts == Int(Int32.max))
        guard case .publishThenAck(let message, let end) = router.route(.retry(reason: "x", status: 500), job: context, now: now) else {
            Issue.record("expected a publish"); return
        }
        ContractCapture.record(message)
        #expect(end == .dead)
        #expect(message.properties.headers?[JobHeaders.attempts] == .int32(Int32.max))
    }
}
