import AMQPClient
import APNSModel
import APNSOutcome
import Foundation
import Logging
import QueueConsumer
import ServiceClock

/// Delivery events in the pipeline (contract §8): the event a job's end produces, when its
/// sender asked, published beside the route's own message and confirmed before the job's ack.
/// With `events = none` (the job's and the bundle's) the hot path pays one branch.
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

    /// The route's message (if any) and the event, published together so they share the
    /// broker's confirms; the job is acked once both are confirmed. The route's message failing
    /// leaves the job to the broker, as without events (`publishThenAck(_:_:)`); the event
    /// failing never does: it is published again until the broker takes it, since delivering
    /// the job again would send it to Apple again.
    func publishThenAck(_ delivery: AMQPDelivery, _ message: AMQPOutboundMessage?, event: AMQPOutboundMessage) async {
        async let eventConfirmed = publishEvent(event)
        if let message {
            do {
                try await broker.publish(message)
            } catch {
                logger.warning(
                    "could not publish the job's outcome; the broker will deliver the job again",
                    metadata: ["amqp.error": "\(error)", "amqp.routing_key": "\(message.routingKey)"])
                await broker.nack(delivery, requeue: true)
                return
            }
        }
        // Not confirmed only when cancelled at the shutdown deadline: the job stays unacked.
        guard await eventConfirmed else { return }
        broker.ackNow(delivery)
    }

    /// Publishes `event` until the broker confirms it; false when cancelled first. One warning
    /// for its first refusal, one notice when it is taken after that.
    func publishEvent(_ event: AMQPOutboundMessage) async -> Bool {
        var delay = Duration.milliseconds(100)
        var refused = 0
        while true {
            do {
                try await broker.publish(event)
                if refused > 0 {
                    logger.notice(
                        "delivery event published after refusals", metadata: ["amqp.routing_key": "\(event.routingKey)", "amqp.refusals": "\(refused)"])
                }
                return true
            } catch {
                if refused == 0 {
                    logger.warning(
                        "could not publish a delivery event; publishing it again, the job is not sent again",
                        metadata: ["amqp.error": "\(error)", "amqp.routing_key": "\(event.routingKey)"])
                }
                refused += 1
                do {
                    try await Task.sleep(for: delay)
                } catch {
                    return false
                }
                delay = min(delay * 2, .seconds(5))
            }
        }
    }
}
