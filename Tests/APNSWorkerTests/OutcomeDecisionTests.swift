import AMQPClient
import APNSModel
import APNSOutcome
import APNSTopologyNames
import Foundation
import QueueConsumer
import Testing

@testable import APNSWorker

/// `OutcomeRouter.decide`: for every outcome, the route of the job's delivery, the end it
/// carries and the hold breaker's signal (`BreakerSignal`), in one table. A new outcome that is
/// missing here fails to compile in `decide` (its switch names every case) and shows up as a row
/// to add.
@Suite struct OutcomeDecisionTests {
    static let bundle = "com.example.app"
    let router = OutcomeRouter(bundleID: bundle, retryPolicy: RetryPolicy(delays: [.seconds(10), .seconds(60)], maxAttempts: 3))
    let now = Date(timeIntervalSince1970: 1_700_000_000)

    func job(previousAttempts: Int) -> OutcomeRouter.JobContext {
        let message = AMQPDeliveredMessage(
            exchange: "apns.jobs", routingKey: Self.bundle, redelivered: false, body: Array(#"{"token":"ab"}"#.utf8),
            properties: .persistentJSON)
        return .init(message: message, jobID: "job-1", token: DeviceToken(hex: "abcd"), previousAttempts: previousAttempts)
    }

    struct Row: Sendable, CustomTestStringConvertible {
        var outcome: Outcome
        var previousAttempts = 0
        /// Where the published message goes (exchange or queue), nil for a plain ack.
        var publishedTo: String?
        var end: JobEnd
        var breaker: BreakerSignal
        var testDescription: String { "\(outcome) after \(previousAttempts) attempts" }
    }

    static let rows: [Row] = [
        Row(outcome: .delivered, publishedTo: nil, end: .delivered, breaker: .healthy),
        Row(
            outcome: .invalidToken(reason: "Unregistered", timestamp: 1), publishedTo: TopologyNames.feedbackExchange,
            end: .invalidToken, breaker: .healthy),
        Row(
            outcome: .retry(reason: "InternalServerError", status: 500), publishedTo: TopologyNames.retryQueue(bundle, delay: .seconds(10)),
            end: .retry, breaker: .healthy),
        Row(
            outcome: .retry(reason: "InternalServerError", status: 500), previousAttempts: 1,
            publishedTo: TopologyNames.retryQueue(bundle, delay: .seconds(60)), end: .retry, breaker: .healthy),
        Row(
            outcome: .retry(reason: "InternalServerError", status: 500), previousAttempts: 2, publishedTo: TopologyNames.deadQueue(bundle),
            end: .dead, breaker: .healthy),
        Row(
            outcome: .dead(reason: "BadDeviceToken", status: 400, detail: "x"), publishedTo: TopologyNames.deadQueue(bundle), end: .dead,
            breaker: .healthy),
        Row(
            outcome: .held(reason: "InvalidProviderToken", status: 403), publishedTo: TopologyNames.workQueue(bundle), end: .held,
            breaker: .hold(reason: "InvalidProviderToken", status: 403)),
        Row(
            outcome: .held(reason: "ExpiredProviderToken", status: 403), previousAttempts: 2, publishedTo: TopologyNames.workQueue(bundle),
            end: .held, breaker: .hold(reason: "ExpiredProviderToken", status: 403)),
    ]

    @Test(arguments: rows)
    func everyOutcomeHasOneRouteEndAndBreakerSignal(_ row: Row) {
        let decision = router.decide(row.outcome, job: job(previousAttempts: row.previousAttempts), now: now)
        #expect(decision.route.end == row.end)
        #expect(decision.breaker == row.breaker)
        switch decision.route {
        case .ack(let end):
            #expect(end == row.end)
            #expect(row.publishedTo == nil)
        case .publishThenAck(let message, let end):
            #expect(end == row.end)
            #expect((message.exchange.isEmpty ? message.routingKey : message.exchange) == row.publishedTo)
        case .rejectToDeadLetter:
            Issue.record("only an oversized job is rejected to the dead queue, never an outcome from APNs")
        }
        #expect(decision.route == router.route(row.outcome, job: job(previousAttempts: row.previousAttempts), now: now))
    }
}
