import AMQPClient
import APNSCore
import Foundation
import Logging
import Synchronization

/// The stages of one job, composed twice: `start` for a consumed job, whose answer from APNs is
/// routed and settled on the thread that received it, with no task of its own unless a publish
/// must wait for its confirm; and `process` for the probe of a held bundle, in the probing task.
extension BundlePipeline {
    /// What the stages before sending decided.
    enum Admission {
        /// An end reached without sending: a poison, malformed or gated job.
        case ended(OutcomeRouter.Route, OutcomeRouter.End)
        case send(Job, OutcomeRouter.JobContext)
    }

    /// One consumed job through every stage to exactly one end. `jobs` counts it until it is
    /// settled; an answer that comes after `jobs` was abandoned (the shutdown deadline) leaves
    /// the job unacked for the broker to deliver again.
    func start(_ delivery: AMQPDelivery, jobs: InFlightJobs) {
        jobs.enter()
        bundleStatistics.jobStarted()
        let started = begin(delivery)
        let trace = beginTrace(delivery)
        let admission = admit(delivery)
        trace?.admitted(admission)
        switch admission {
        case .ended(let route, let end):
            settle(delivery, route, jobs: jobs) {
                self.count(end, since: started)
                trace?.settled(end, route: route)
            }
        case .send(let job, let context):
            let sent = ContinuousClock.now
            transport.send(job.notification) { result in
                trace?.answered(result)
                let outcome = self.answered(result, sentAt: sent)
                guard !jobs.isAbandoned else { return self.finished(jobs) }
                let decision = self.judge(outcome, job: context)
                self.settle(delivery, decision.route, jobs: jobs) {
                    self.count(decision.end, since: started)
                    self.report(outcome, end: decision.end, job: context)
                    trace?.settled(decision.end, route: decision.route)
                }
            }
        }
    }

    /// One job through every stage to exactly one end, in the calling task (a probe).
    func process(_ delivery: AMQPDelivery) async {
        bundleStatistics.jobStarted()
        defer { bundleStatistics.jobFinished() }
        let started = begin(delivery)
        let trace = beginTrace(delivery)
        let admission = admit(delivery)
        trace?.admitted(admission)
        switch admission {
        case .ended(let route, let end):
            await settle(delivery, route)
            count(end, since: started)
            trace?.settled(end, route: route)
        case .send(let job, let context):
            let outcome = await send(job, trace: trace)
            // Cancelled at the shutdown deadline: leave the job unacked for the broker to deliver again.
            if Task.isCancelled { return }
            let decision = judge(outcome, job: context)
            await settle(delivery, decision.route)
            count(decision.end, since: started)
            report(outcome, end: decision.end, job: context)
            trace?.settled(decision.end, route: decision.route)
        }
    }

    /// The job's span when `[tracing]` is on; nil (one branch) when it is off.
    private func beginTrace(_ delivery: AMQPDelivery) -> JobTrace? {
        guard let tracing else { return nil }
        return tracing.begin(delivery.message, queue: queue, bundleID: settings.bundleID, transport: settings.transportKind)
    }

    private func begin(_ delivery: AMQPDelivery) -> ContinuousClock.Instant {
        fleet.taken(publishedAt: delivery.message.properties.timestamp)
        return ContinuousClock.now
    }

    private func finished(_ jobs: InFlightJobs) {
        bundleStatistics.jobFinished()
        jobs.leave()
    }

    /// The stages before sending: the delivery limit, parsing, the job's log line and the
    /// rollout gate.
    func admit(_ delivery: AMQPDelivery) -> Admission {
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
                        "job.id": "\(context.jobID ?? "-")", "amqp.deliveries": "\(deliveries)",
                        "worker.max_deliveries": "\(settings.maxDeliveries)",
                    ])
                let route = router.routeDeliveryLimitExceeded(
                    job: context, deliveries: deliveries, maxDeliveries: settings.maxDeliveries, now: Date())
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
            return .ended(router.routeMalformed(job: context, reason: error.reason, detail: error.description, now: Date()), .dead)
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

    func send(_ job: Job, trace: JobTrace? = nil) async -> Outcome {
        let sent = ContinuousClock.now
        let result = await transport.send(job.notification)
        trace?.answered(result)
        return answered(result, sentAt: sent)
    }

    /// APNs' answer, timed and classified.
    private func answered(_ result: TransportResult, sentAt sent: ContinuousClock.Instant) -> Outcome {
        bundleStatistics.apnsAnswered(after: sent.duration(to: .now))
        return OutcomeClassifier.classify(result)
    }

    /// The decision for an outcome, and its effect on the hold breaker.
    func judge(_ outcome: Outcome, job context: OutcomeRouter.JobContext) -> OutcomeRouter.Decision {
        let decision = router.decide(outcome, job: context, now: Date())
        applyToBreaker(decision.breaker)
        return decision
    }

    /// What is said about a settled job: its log line, and an invalid token to the observer.
    func report(_ outcome: Outcome, end: OutcomeRouter.End, job context: OutcomeRouter.JobContext) {
        var jobID: String { context.jobID ?? "-" }
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

    /// Carries out a route from any thread: a bare ack at once, a publish (which must wait for
    /// its confirm) in a task. `then` runs once the job is settled.
    func settle(_ delivery: AMQPDelivery, _ route: OutcomeRouter.Route, jobs: InFlightJobs, then: @escaping @Sendable () -> Void) {
        switch route {
        case .ack:
            broker.ackNow(delivery)
            then()
            finished(jobs)
        case .publishThenAck:
            Task {
                await self.settle(delivery, route)
                then()
                self.finished(jobs)
            }
        }
    }
}
