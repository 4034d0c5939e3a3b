import AMQPClient
import APNSJSON
import APNSModel
import APNSOutcome
import Foundation
import Logging
import QueueConsumer
import Synchronization

/// The stages of one job, composed once (`compose`) for a consumed job and a held bundle's
/// probe alike: the stages before sending run in the caller's task; APNs' answer is routed and
/// a bare ack settled on the thread that received it (see `BundlePipeline`'s execution model).
extension BundlePipeline {
    /// What the stages before sending decided.
    enum Admission {
        /// An end reached without sending: a poison, malformed or gated job.
        case ended(OutcomeRouter.Route, OutcomeRouter.End)
        case send(Job, OutcomeRouter.JobContext)
    }

    /// A job between its delivery and its settle: what its end needs to know.
    struct JobInFlight: Sendable {
        var delivery: AMQPDelivery
        var started: ContinuousClock.Instant
        /// A held bundle's probe (`ConsumerStateMachine.settled(probe:now:)`).
        var isProbe: Bool
        /// The job's span when `[tracing]` is on (`JobTracing.swift`); nil, one branch, when off.
        var trace: JobTrace?
    }

    /// How a job ended: what its count and its log line need.
    enum Ending: Sendable {
        case unsent(OutcomeRouter.End)
        case answered(Outcome, OutcomeRouter.End, OutcomeRouter.JobContext)
    }

    /// One job the machine counted in flight, through every stage to exactly one end.
    func compose(_ delivery: AMQPDelivery, probe: Bool) {
        let job = JobInFlight(delivery: delivery, started: clock.now, isProbe: probe, trace: beginTrace(delivery))
        bundleStatistics.jobStarted()
        let admission = admit(delivery)
        job.trace?.admitted(admission)
        switch admission {
        case .ended(let route, let end):
            settle(job, route, .unsent(end))
        case .send(let parsed, let context):
            let sent = clock.now
            transport.send(parsed.notification) { result in
                self.answered(result, job: job, context: context, sentAt: sent)
            }
        }
    }

    /// APNs' answer, on the transport's thread: timed, classified, routed, told to the machine
    /// (the hold breaker), settled. An answer that comes after the shutdown deadline settles
    /// nothing: the job stays unacked for the broker to deliver again.
    private func answered(_ result: TransportResult, job: JobInFlight, context: OutcomeRouter.JobContext, sentAt sent: ContinuousClock.Instant) {
        job.trace?.answered(result)
        bundleStatistics.apnsAnswered(after: sent.duration(to: clock.now))
        let outcome = OutcomeClassifier.classify(result)
        let decision = router.decide(outcome, job: context, now: clock.wallTime)
        switch consumer.answered(decision.breaker) {
        case .settle:
            settle(job, decision.route, .answered(outcome, decision.end, context))
        case .drop:
            bundleStatistics.jobFinished()
        }
    }

    /// The one settle: a bare ack at once, from any thread (`ackNow` never blocks); a route that
    /// publishes must await the broker's confirm, so it continues in the consumer's settle runner
    /// (a child of `run()`: cancelled with it at the shutdown deadline). Then the job's end is
    /// counted and told to the machine.
    func settle(_ job: JobInFlight, _ route: OutcomeRouter.Route, _ ending: Ending) {
        switch route {
        case .ack:
            broker.ackNow(job.delivery)
            finished(job, ending, route)
        case .publishThenAck(let message, _):
            consumer.settleLater {
                await self.publishThenAck(job.delivery, message)
                self.finished(job, ending, route)
            }
        case .rejectToDeadLetter:
            // Without requeue, for the broker to dead-letter it (a job over the size limit).
            consumer.settleLater {
                await self.broker.nack(job.delivery, requeue: false)
                self.finished(job, ending, route)
            }
        }
    }

    /// The job's span when `[tracing]` is on; nil (one branch) when it is off.
    private func beginTrace(_ delivery: AMQPDelivery) -> JobTrace? {
        guard let tracing else { return nil }
        return tracing.begin(delivery.message, queue: queue, bundleID: settings.bundleID, transport: settings.transportKind)
    }

    /// Publish (confirmed), then ack. A publish that fails (connection lost, returned, nacked)
    /// leaves the job to the broker to deliver again: at-least-once.
    func publishThenAck(_ delivery: AMQPDelivery, _ message: AMQPOutboundMessage) async {
        do {
            try await broker.publish(message)
            broker.ackNow(delivery)
        } catch {
            logger.warning(
                "could not publish the job's outcome; the broker will deliver the job again",
                metadata: ["amqp.error": "\(error)", "amqp.routing_key": "\(message.routingKey)"])
            await broker.nack(delivery, requeue: true)
        }
    }

    private func finished(_ job: JobInFlight, _ ending: Ending, _ route: OutcomeRouter.Route) {
        switch ending {
        case .unsent(let end):
            count(end, since: job.started)
            job.trace?.settled(end, route: route)
        case .answered(let outcome, let end, let context):
            count(end, since: job.started)
            report(outcome, end: end, job: context)
            job.trace?.settled(end, route: route)
        }
        bundleStatistics.jobFinished()
        consumer.settled(probe: job.isProbe)
    }

    /// One job reached `end`. The one place a job's end is counted: the tally behind the stop
    /// line, the admin page and `/api/status`, the Prometheus counter (both in
    /// `BundleStatistics.jobEnded`), and the registry's hourly counts (the observer).
    func count(_ end: OutcomeRouter.End, since started: ContinuousClock.Instant) {
        if let kind = JobEndKind(end) { observer?.jobEnded(bundleID: settings.bundleID, end: kind) }
        bundleStatistics.jobEnded(end, after: started.duration(to: clock.now))
    }

    /// The stages before sending: the delivery limit, parsing, the job's log line and the
    /// rollout gate.
    func admit(_ delivery: AMQPDelivery) -> Admission {
        if let size = delivery.message.oversizedBodySize {
            let copied = delivery.message.oversizedBodyDeadLettered
            logger.warning(
                copied
                    ? "job too large: dead-lettered as it arrived, body unchanged"
                    : "job too large: rejected for the broker to dead-letter, body unchanged",
                metadata: ["amqp.body_size": "\(size)", "job.max_body_size": "\(JobParser.Limits().maxBodyBytes)"])
            return .ended(router.routeOversized(copied: copied), .dead)
        }
        if delivery.message.oversizedPropertiesSize != nil || delivery.message.headersNestedTooDeep {
            // Its header table was not kept: no attempt count to read, and the dead letter
            // carries the x-apns-* headers alone (contract §4).
            let context = OutcomeRouter.JobContext(
                message: delivery.message, jobID: delivery.message.properties.messageID, token: nil, previousAttempts: 0)
            let error =
                delivery.message.oversizedPropertiesSize.map { JobError.oversizedProperties($0, limit: AMQPProperties.maximumEncodedSize) }
                ?? JobError.nestedHeaders(limit: AMQPProperties.maximumHeaderDepth)
            logger.warning("malformed job", metadata: ["job.error": "\(error)", "job.reason": "\(error.reason)"])
            return .ended(router.routeMalformed(job: context, reason: error.reason, detail: error.description, now: clock.wallTime), .dead)
        }
        let previousAttempts = OutcomeRouter.JobContext.previousAttempts(in: delivery.message)
        // A first delivery cannot be one too many; only redeliveries are counted.
        if delivery.message.redelivered {
            let deliveries = deliveryLimit.withLock { $0.deliveries(of: delivery.message) }
            if deliveries > settings.maxDeliveries {
                let context = OutcomeRouter.JobContext(
                    message: delivery.message, jobID: delivery.message.properties.messageID, token: nil,
                    previousAttempts: previousAttempts)
                logger.error(
                    "poison job: delivered too often without reaching an end; dead-lettered unread",
                    metadata: [
                        "job.id": "\(context.jobID.map { AMQPShortString.logSafe($0) } ?? "-")", "amqp.deliveries": "\(deliveries)",
                        "worker.max_deliveries": "\(settings.maxDeliveries)",
                    ])
                let route = router.routeDeliveryLimitExceeded(
                    job: context, deliveries: deliveries, maxDeliveries: settings.maxDeliveries, now: clock.wallTime)
                return .ended(route, .dead)
            }
        }
        let job: Job
        switch parse(delivery) {
        case .failure(let error):
            let context = OutcomeRouter.JobContext(
                message: delivery.message, jobID: delivery.message.properties.messageID, token: nil,
                previousAttempts: previousAttempts)
            logger.warning("malformed job", metadata: ["job.error": "\(error)", "job.reason": "\(error.reason)"])
            return .ended(router.routeMalformed(job: context, reason: error.reason, detail: error.description, now: clock.wallTime), .dead)
        case .success(let parsed):
            job = parsed
        }
        let context = OutcomeRouter.JobContext(message: delivery.message, job: job, previousAttempts: previousAttempts)
        log(job, attempt: previousAttempts + 1, redelivered: delivery.message.redelivered)
        bundleStatistics.jobReceived()
        if case .hold(let why) = gate(job) {
            logger.debug("rollout gate holds job", metadata: ["job.id": "\(job.id)", "gate.why": "\(why)"])
            return .ended(router.routeGated(job: context), .gated)
        }
        return .send(job, context)
    }

    func parse(_ delivery: AMQPDelivery) -> Result<Job, JobError> {
        JobParser.parse(
            body: delivery.message.body, bundleID: settings.bundleID, messageID: delivery.message.properties.messageID,
            defaultEnvironment: settings.defaultEnvironment, transport: settings.transportKind)
    }

    func log(_ job: Job, attempt: Int, redelivered: Bool) {
        logger.debug(
            "job",
            metadata: [
                "job.id": "\(job.id)", "apns.target": "\(job.target.redacted)", "apns.push_type": "\(job.pushType.rawValue)",
                "job.attempt": "\(attempt)", "amqp.redelivered": "\(redelivered)",
            ])
    }

    func gate(_ job: Job) -> RolloutRule.Decision {
        let server: String?
        if case .string(let name) = job.userInfo["syncServer"] { server = name } else { server = nil }
        return rollout.withLock { $0.decide(syncServer: server) }
    }

    /// What is said about a settled job: its log line, and an invalid token to the observer.
    func report(_ outcome: Outcome, end: OutcomeRouter.End, job context: OutcomeRouter.JobContext) {
        // A job id from a publisher's message_id may hold CR/LF: never raw in a log line.
        var jobID: String { context.jobID.map { AMQPShortString.logSafe($0) } ?? "-" }
        switch outcome {
        case .delivered:
            // Debug, not info: at thousands of jobs a second one line each costs more than the
            // job's own work; APNS_WORKER_LOG_LEVEL=debug turns it on.
            logger.debug("job delivered", metadata: ["job.id": "\(jobID)", "apns.target": "\(context.target?.redacted ?? "-")"])
        case .invalidToken(let reason, let timestamp):
            // Only a device token reaches the registry's invalid-token marks: a broadcast channel
            // Apple does not know is no device of any group (contract §7).
            if let token = context.token { observer?.tokenInvalid(bundleID: settings.bundleID, token: token, reason: reason, timestamp: timestamp) }
            let what = context.target?.channel == nil ? "device token invalid" : "broadcast channel unknown or invalid"
            logger.info(
                "\(what); feedback event published",
                metadata: ["job.id": "\(jobID)", "apns.target": "\(context.target?.redacted ?? "-")", "apns.reason": "\(reason)"])
        case .retry(let reason, let status) where end == .retry:
            bundleStatistics.retryScheduled(attempt: context.previousAttempts + 1)
            logger.info("job will be retried", metadata: ["job.id": "\(jobID)", "apns.reason": "\(reason)", "apns.status": "\(status)"])
        case .retry(let reason, let status):
            logger.warning(
                "job dead-lettered: retries exhausted", metadata: ["job.id": "\(jobID)", "apns.reason": "\(reason)", "apns.status": "\(status)"])
        case .dead(let reason, let status, _):
            logger.warning("job dead-lettered", metadata: ["job.id": "\(jobID)", "apns.reason": "\(reason)", "apns.status": "\(status)"])
        case .held:
            break  // logged once by the breaker
        }
    }
}
