import AMQPClient
import APNSJSON
import APNSModel
import APNSOutcome
import APNSTopology
import Foundation
import Logging
import QueueConsumer
import ServiceClock
import Synchronization

/// The stages of one job, composed once (`compose`) for a consumed job and a held bundle's
/// probe alike: the stages before sending run in the caller's task; APNs' answer is routed and
/// a bare ack settled on the thread that received it (see `BundlePipeline`'s execution model).
extension BundlePipeline {
    /// What the stages before sending decided for a delivery: not an end itself, but whether
    /// the job goes to APNs or is settled unsent.
    enum SendOrSettle {
        case send(Job, OutcomeRouter.JobContext)
        /// Settled without sending (too large, malformed, poison, gated): the route carries the
        /// end; `details` are what the end line says about why.
        case settleUnsent(OutcomeRouter.Route, details: Logger.Metadata)
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

    /// One job the machine counted in flight, through every stage to exactly one end.
    func compose(_ delivery: AMQPDelivery, probe: Bool) {
        let job = JobInFlight(delivery: delivery, started: clock.now, isProbe: probe, trace: beginTrace(delivery))
        bundleStatistics.jobStarted()
        let next = admit(delivery)
        job.trace?.admitted(next)
        switch next {
        case .settleUnsent(let route, let details):
            settle(job, route, details: details, event: unsentEvent(route, delivery))
        case .send(let parsed, let context):
            let sent = clock.now
            transport.send(parsed.notification) { result in
                self.answered(result, job: job, parsed: parsed, context: context, sentAt: sent)
            }
        }
    }

    /// APNs' answer, on the transport's thread: timed, classified, routed, told to the machine
    /// (the hold breaker), settled. An answer that comes after the shutdown deadline settles
    /// nothing: the job stays unacked for the broker to deliver again.
    private func answered(
        _ result: TransportResult, job: JobInFlight, parsed: Job, context: OutcomeRouter.JobContext, sentAt sent: ContinuousClock.Instant
    ) {
        job.trace?.answered(result)
        bundleStatistics.apnsAnswered(after: sent.duration(to: clock.now))
        let outcome = OutcomeClassifier.classify(result)
        let router = self.router
        let decision = router.decide(outcome, job: context, now: clock.wallTime)
        // Only the probe's answer ends a hold (`ConsumerStateMachine.answered`).
        switch consumer.answered(decision.breaker, endsAHold: job.isProbe) {
        case .settle:
            let event = answeredEvent(result, outcome: outcome, route: decision.route, job: parsed, context: context, router: router)
            settle(job, decision.route, answered: (outcome, context), event: event)
        case .drop:
            bundleStatistics.jobFinished()
        }
    }

    /// The one settle: a bare ack at once, from any thread (`ackNow` never blocks); a route that
    /// publishes, or a job's delivery event, must await the broker's confirm, so it joins the
    /// batch the consumer's settle runner publishes next (`BundlePipeline+Publishing.swift`; a
    /// child of `run()`: cancelled with it at the shutdown deadline). Then the job's end is
    /// counted, logged and told to the machine. `answered`: APNs' outcome, for a job that was
    /// sent; `details`: why a job settled unsent; `event`: its delivery event, published with
    /// the route's message before the ack (`BundlePipeline+Events.swift`).
    func settle(
        _ job: JobInFlight, _ route: OutcomeRouter.Route, answered: (Outcome, OutcomeRouter.JobContext)? = nil,
        details: Logger.Metadata = [:], event: AMQPOutboundMessage? = nil
    ) {
        switch route {
        case .ack where event == nil:
            broker.ackNow(job.delivery)
            finished(job, route, answered: answered, details: details)
        case .ack:
            publishThenAck(PublishingSettle(job: job, route: route, message: nil, event: event, answered: answered, details: details))
        case .publishThenAck(let message, _):
            publishThenAck(PublishingSettle(job: job, route: route, message: message, event: event, answered: answered, details: details))
        case .rejectToDeadLetter:
            // Without requeue, for the broker to dead-letter it (a job over the size limit).
            consumer.settleLater {
                // Its event first: once rejected, the job is out of the worker's hands.
                var eventTaken = true
                if let event {
                    eventTaken = false
                    await self.publishUntilTaken([event], refusedFirst: nil) { _ in eventTaken = true }
                }
                if eventTaken { await self.broker.nack(job.delivery, requeue: false) }
                self.finished(job, route, answered: answered, details: details)
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

    /// Every settled job, sent or not, ends here: its route's end counted, reported, traced.
    func finished(
        _ job: JobInFlight, _ route: OutcomeRouter.Route, answered: (Outcome, OutcomeRouter.JobContext)?, details: Logger.Metadata
    ) {
        let end = route.end
        count(end, since: job.started)
        report(end, answered: answered, details: details)
        job.trace?.settled(route)
        bundleStatistics.jobFinished()
        consumer.settled(probe: job.isProbe)
    }

    /// One job reached `end`. The one place a job's end is counted: the tally behind the stop
    /// line, the admin page and `/api/status`, the Prometheus counter (both in
    /// `BundleStatistics.jobEnded`), and the registry's hourly counts (the observer; `held` is
    /// no end there).
    func count(_ end: JobEnd, since started: ContinuousClock.Instant) {
        if end.contractName != nil { observer?.jobEnded(bundleID: settings.bundleID, end: end) }
        bundleStatistics.jobEnded(end, after: started.duration(to: clock.now))
    }

    /// The stages before sending: the delivery limit, parsing, the job's log line and the
    /// rollout gate. A job settled unsent gets its end line when it is settled, with `details`.
    func admit(_ delivery: AMQPDelivery) -> SendOrSettle {
        switch DeadOnArrival(delivery.message) {
        case .bodyTooLarge(let size, let copied):
            let details: Logger.Metadata = [
                // The reason its dead letter names (`oversizedDeadLetter`, `JobEnvelope.failureReason`).
                "job.reason": "\(copied ? JobError.Kind.malformedJob.rawValue : JobEnvelope.messageTooLarge)", "amqp.body_size": "\(size)",
                "job.max_body_size": "\(JobParser.Limits().maxBodyBytes)",
                "job.dead_letter": copied ? "copied as it arrived, body unchanged" : "rejected for the broker to dead-letter, body unchanged",
            ]
            return .settleUnsent(router.routeOversized(copied: copied), details: details)
        case .headerTableDropped(let error):
            // No attempt count to read, and the dead letter carries the x-apns-* headers alone (contract §4).
            let context = OutcomeRouter.JobContext(
                message: delivery.message, jobID: delivery.message.properties.messageID, token: nil, previousAttempts: 0)
            return .settleUnsent(
                router.routeMalformed(job: context, reason: error.reason, detail: error.description, now: clock.wallTime),
                details: Self.malformed(error, context))
        case nil:
            break
        }
        let previousAttempts = OutcomeRouter.JobContext.previousAttempts(in: delivery.message)
        // A first delivery cannot be one too many; only redeliveries are counted.
        if delivery.message.redelivered {
            let deliveries = deliveryLimit.withLock { $0.deliveries(of: delivery.message) }
            if deliveries > settings.maxDeliveries {
                let context = OutcomeRouter.JobContext(
                    message: delivery.message, jobID: delivery.message.properties.messageID, token: nil,
                    previousAttempts: previousAttempts)
                let route = router.routeDeliveryLimitExceeded(
                    job: context, deliveries: deliveries, maxDeliveries: settings.maxDeliveries, now: clock.wallTime)
                // Unread: a poison job may crash or stall the worker that reads it.
                return .settleUnsent(
                    route,
                    details: [
                        "job.id": "\(Self.logSafeID(context))", "job.reason": "\(OutcomeRouter.deliveryLimitExceeded)",
                        "amqp.deliveries": "\(deliveries)", "worker.max_deliveries": "\(settings.maxDeliveries)",
                    ])
            }
        }
        let job: Job
        switch parse(delivery) {
        case .failure(let error):
            let context = OutcomeRouter.JobContext(
                message: delivery.message, jobID: delivery.message.properties.messageID, token: nil,
                previousAttempts: previousAttempts)
            return .settleUnsent(
                router.routeMalformed(job: context, reason: error.reason, detail: error.description, now: clock.wallTime),
                details: Self.malformed(error, context))
        case .success(let parsed):
            job = parsed
        }
        let context = OutcomeRouter.JobContext(message: delivery.message, job: job, previousAttempts: previousAttempts)
        log(job, attempt: previousAttempts + 1, redelivered: delivery.message.redelivered)
        bundleStatistics.jobReceived()
        if case .gated(let why) = gate(job) {
            return .settleUnsent(router.routeGated(job: context), details: ["job.id": "\(job.id)", "gate.why": "\(why)"])
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

    /// The end line's details of a malformed job.
    static func malformed(_ error: JobError, _ context: OutcomeRouter.JobContext) -> Logger.Metadata {
        ["job.id": "\(logSafeID(context))", "job.reason": "\(error.reason)", "job.error": "\(error)"]
    }

    /// A job id from a publisher's message_id may hold CR/LF: never raw in a log line.
    static func logSafeID(_ context: OutcomeRouter.JobContext) -> String {
        context.jobID.map { AMQPShortString.logSafe($0) } ?? "-"
    }

    /// What is said about a settled job: an invalid token to the observer, a retry to its
    /// counter, and its one end line, `end.logLine` with `job.end` (the end's `label`, as in the
    /// metrics). `details` say why a job settled unsent.
    func report(_ end: JobEnd, answered: (Outcome, OutcomeRouter.JobContext)?, details: Logger.Metadata) {
        if case let (outcome, context)? = answered {
            switch outcome {
            case .invalidToken(let reason, let timestamp):
                // Only a device token reaches the registry's invalid-token marks: a broadcast
                // channel Apple does not know is no device of any group (contract §7).
                if let token = context.token { observer?.tokenInvalid(bundleID: settings.bundleID, token: token, reason: reason, timestamp: timestamp) }
            case .retry where end == .retry:
                bundleStatistics.retryScheduled(attempt: context.previousAttempts + 1)
            case .delivered, .retry, .dead, .held:
                break
            }
        }
        let line = end.logLine
        // The metadata is built only when the line is written: most ends are `delivered`, at debug.
        guard logger.logLevel <= line.level else { return }
        var metadata = details
        metadata["job.end"] = "\(end.label)"
        if case let (outcome, context)? = answered {
            metadata["job.id"] = "\(Self.logSafeID(context))"
            switch outcome {
            case .delivered, .held:
                metadata["apns.target"] = "\(context.target?.redacted ?? "-")"
            case .invalidToken(let reason, _):
                metadata["apns.target"] = "\(context.target?.redacted ?? "-")"
                metadata["apns.reason"] = "\(reason)"
            case .retry(let reason, let status):
                if end == .dead { metadata["job.reason"] = "\(OutcomeRouter.retriesExhausted)" }
                metadata["apns.reason"] = "\(reason)"
                metadata["apns.status"] = "\(status)"
            case .dead(let reason, let status, _):
                metadata["apns.reason"] = "\(reason)"
                metadata["apns.status"] = "\(status)"
            }
        }
        logger.log(level: line.level, line.message, metadata: metadata)
    }
}
