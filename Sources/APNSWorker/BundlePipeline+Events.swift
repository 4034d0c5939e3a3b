import AMQPClient
import APNSModel
import APNSOutcome
import Foundation
import Logging
import QueueConsumer
import ServiceClock

/// Delivery events in the pipeline (contract §8): the event a job's end produces, when its
/// sender asked, published beside the route's own message and confirmed before the job's ack
/// (in batches: `BundlePipeline+Publishing.swift`). With `events = none` (the job's and the
/// bundle's) the hot path pays one branch.
extension BundlePipeline {
    /// The event of a job Apple answered; nil when it wants none.
    func answeredEvent(
        _ result: TransportResult, outcome: Outcome, route: OutcomeRouter.Route, job: Job, context: OutcomeRouter.JobContext,
        router: OutcomeRouter
    ) -> AMQPOutboundMessage? {
        let level = router.eventLevel(of: job)
        guard level != .none else { return nil }
        let facts = OutcomeRouter.answeredFacts(result, outcome: outcome, end: route.end, job: job, attempts: context.previousAttempts + 1)
        return router.event(end: route.end, level: level, job: context, facts: facts, now: clock.wallTime)
    }

    /// The event of a job settled unsent: only a dead one has an end (a gated job comes back).
    /// Its body was not read, so it follows the bundle's level, with the id contract §2 gives:
    /// its `message_id` when that is a UUID, else a new one.
    func unsentEvent(_ route: OutcomeRouter.Route, _ delivery: AMQPDelivery) -> AMQPOutboundMessage? {
        let router = self.router
        guard router.events != .none, route.end == .dead else { return nil }
        let messageID = delivery.message.properties.messageID.flatMap { UUID(uuidString: $0) == nil ? nil : $0 }
        let context = OutcomeRouter.JobContext(message: delivery.message, jobID: messageID, token: nil, previousAttempts: 0)
        let facts = OutcomeRouter.unsentFacts(route, environment: settings.defaultEnvironment)
        return router.event(end: .dead, level: router.events, job: context, facts: facts, now: clock.wallTime)
    }
}
