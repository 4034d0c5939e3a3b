import AMQPClient
import APNSBinaryProtocol
import APNSJSON
import APNSModel
import APNSOutcome
import APNSTopology
import APNSTopologyNames
import Foundation
import QueueConsumer

/// Turns a job's outcome into what the worker does with the broker (contract §4), with no IO:
/// the message to publish (feedback event, retry, dead letter), if any, and how the job's own
/// delivery is settled. The worker publishes with confirms and only then acks. Each route
/// carries the job's `JobEnd`: the one place an end is decided (docs/decisions.md, "One
/// vocabulary for a job's end").
public struct OutcomeRouter: Sendable {
    public var bundleID: String
    public var retryPolicy: RetryPolicy
    /// The bundle's delivery events (contract §8), for jobs that do not say (`OutcomeRouter+Events.swift`).
    public var events: DeliveryEventLevel

    public init(bundleID: String, retryPolicy: RetryPolicy, events: DeliveryEventLevel = .none) {
        self.bundleID = bundleID
        self.retryPolicy = retryPolicy
        self.events = events
    }

    /// Where one job's delivery goes, and the end it reaches there.
    public enum Route: Sendable, Hashable {
        /// Ack; nothing to publish: `delivered`, or `dead` for a job too large whose body was
        /// copied to the dead queue as it arrived.
        case ack(end: JobEnd)
        /// Publish this, wait for the broker's confirm, then ack.
        case publishThenAck(AMQPOutboundMessage, end: JobEnd)
        /// Reject without requeue, for the broker to dead-letter the message to the dead queue
        /// (the work queue's `x-dead-letter-*` arguments): a job over the size limit, whose body
        /// the worker never kept; its end is `dead`. The worker's only reject without requeue, so
        /// the tools can name the reason (`JobEnvelope.failureReason`).
        case rejectToDeadLetter

        /// The end the job reaches by this route: what is counted and logged.
        public var end: JobEnd {
            switch self {
            case .ack(let end), .publishThenAck(_, let end): end
            case .rejectToDeadLetter: .dead
            }
        }
    }

    /// The job as the router needs it: the delivered message, left untouched in what it forwards.
    public struct JobContext: Sendable {
        public var message: AMQPDeliveredMessage
        /// The job id (`apns-id`), when the body parsed far enough to have one. Spelt out only
        /// when asked for: most jobs are delivered and never need it, and Foundation's
        /// `uuidString` formats through `snprintf`.
        public var jobID: String? {
            switch id {
            case .parsed(let uuid, _): uuid.uuidString
            case .unparsed(let text): text
            }
        }
        /// The job id when the parser made it (`Job.idGenerated`): the one id a copy carries as
        /// its `message_id`.
        public var generatedID: String? {
            guard case .parsed(let uuid, generated: true) = id else { return nil }
            return uuid.uuidString
        }
        private var id: JobIdentity
        /// The device token or broadcast channel, when the body parsed far enough to have one
        /// (in full for feedback events, redacted for logs).
        public var target: PushTarget?
        /// Attempts made before this one (`x-apns-attempt` of the delivery, 0 when absent),
        /// within 0...2^31−1 whatever the caller passed, so counting this attempt cannot overflow.
        public private(set) var previousAttempts: Int

        /// The device token; nil for a broadcast job or an unparsed body. Only a device token
        /// may reach the registry's invalid-token marks.
        public var token: DeviceToken? { target?.token }

        public init(message: AMQPDeliveredMessage, jobID: String?, token: DeviceToken?, previousAttempts: Int) {
            self.message = message
            self.id = .unparsed(jobID)
            self.target = token.map { .device($0) }
            self.previousAttempts = min(max(previousAttempts, 0), JobEnvelope.maximumCount)
        }

        /// The context of a job whose body parsed.
        public init(message: AMQPDeliveredMessage, job: Job, previousAttempts: Int) {
            self.message = message
            self.id = .parsed(job.id, generated: job.idGenerated)
            self.target = job.target
            self.previousAttempts = min(max(previousAttempts, 0), JobEnvelope.maximumCount)
        }

        private enum JobIdentity: Sendable {
            case parsed(UUID, generated: Bool)
            case unparsed(String?)
        }

        /// Reads `x-apns-attempt` from the message headers (`JobEnvelope`): absent, or not an
        /// integer from 0 to 2^31−1, counts as 0.
        public static func previousAttempts(in message: AMQPDeliveredMessage) -> Int {
            JobEnvelope(message).previousAttempts
        }
    }

    /// Everything the pipeline does with an outcome, decided in one place: the route for the
    /// job's delivery (which carries its end) and the breaker's signal (`ConsumerStateMachine.answered`):
    /// `.hold` for a provider fault (the bundle holds, or stays held), `.healthy` when APNs judged
    /// the job, not the provider's credentials (a hold ends). Every outcome is named:
    /// a new one must say here whether it holds the bundle.
    public func decide(_ outcome: Outcome, job: JobContext, now: Date) -> (route: Route, breaker: BreakerSignal) {
        let breaker: BreakerSignal
        switch outcome {
        case .held(let reason, let status): breaker = .hold(reason: reason, status: status)
        case .delivered, .invalidToken, .retry, .dead: breaker = .healthy
        }
        return (route(outcome, job: job, now: now), breaker)
    }

    /// The route for an outcome reached after sending the job to APNs (this attempt counted).
    public func route(_ outcome: Outcome, job: JobContext, now: Date) -> Route {
        let attemptsMade = job.previousAttempts + 1
        switch outcome {
        case .delivered:
            return .ack(end: .delivered)
        case .invalidToken(let reason, let timestamp):
            return .publishThenAck(feedbackEvent(job: job, reason: reason, timestamp: timestamp), end: .invalidToken)
        case .retry(let reason, let status):
            if let delay = retryPolicy.delay(afterAttempt: attemptsMade) {
                return .publishThenAck(retryMessage(job: job, attemptsMade: attemptsMade, delay: delay), end: .retry)
            } else {
                let detail = "gave up after \(attemptsMade) attempts; last: \(reason) (status \(status))"
                return .publishThenAck(
                    deadLetter(job: job, reason: Self.retriesExhausted, status: status, attempts: attemptsMade, detail: detail, now: now),
                    end: .dead)
            }
        case .dead(let reason, let status, let detail):
            return .publishThenAck(
                deadLetter(job: job, reason: reason, status: status, attempts: attemptsMade, detail: detail, now: now), end: .dead)
        case .held:
            return .publishThenAck(heldMessage(job: job), end: .held)
        }
    }

    /// A job delivered more than `maxDeliveries` times (contract §4): dead before anything else
    /// is done with it; its body was never parsed, so attempts are those of its headers.
    public func routeDeliveryLimitExceeded(job: JobContext, deliveries: Int, maxDeliveries: Int, now: Date) -> Route {
        let detail = "delivered \(deliveries) times (maxDeliveries \(maxDeliveries)) without reaching an end: it may crash or stall workers"
        return .publishThenAck(
            deadLetter(
                job: job, reason: Self.deliveryLimitExceeded, status: 0, attempts: job.previousAttempts, detail: detail, now: now),
            end: .dead)
    }

    public static let deliveryLimitExceeded = "DeliveryLimitExceeded"
    /// The dead letter's reason when a retryable outcome has no attempt left.
    public static let retriesExhausted = "RetriesExhausted"

    /// A job that never reached APNs because it is malformed (contract §2): dead, status 0.
    public func routeMalformed(job: JobContext, reason: String, detail: String, now: Date) -> Route {
        .publishThenAck(
            deadLetter(job: job, reason: reason, status: 0, attempts: job.previousAttempts, detail: detail, now: now),
            end: .dead)
    }

    /// A job larger than contract §4's limit. Its body was copied to the dead queue frame by
    /// frame as it arrived (`oversizedDeadLetter`), and the broker confirmed the copy: ack. When
    /// that copy could not be made, the body was dropped as it arrived and the broker
    /// dead-letters it, body unchanged (without the x-apns-* headers: the fallback).
    public func routeOversized(copied: Bool) -> Route { copied ? .ack(end: .dead) : .rejectToDeadLetter }

    /// A job the rollout gate gated: into the first retry queue, attempts unchanged, so it
    /// meets the gate again after the shortest delay and never counts towards `maxAttempts`.
    public func routeGated(job: JobContext) -> Route {
        .publishThenAck(retryMessage(job: job, attemptsMade: job.previousAttempts, delay: retryPolicy.delays[0]), end: .gated)
    }

    // MARK: - Messages

    /// The event for an invalid token, or for a broadcast job's unknown or invalid channel
    /// (contract §7: `"channel"` in place of `"token"`).
    func feedbackEvent(job: JobContext, reason: String, timestamp: Int64?) -> AMQPOutboundMessage {
        let event: FeedbackEvent
        switch job.target {
        case .channel(let channel):
            event = FeedbackEvent(bundleId: bundleID, channel: channel.id, reason: reason, timestamp: timestamp, jobId: job.jobID)
        case .device(let token):
            event = FeedbackEvent(bundleId: bundleID, token: token.hex, reason: reason, timestamp: timestamp, jobId: job.jobID)
        case nil:
            event = FeedbackEvent(bundleId: bundleID, token: "", reason: reason, timestamp: timestamp, jobId: job.jobID)
        }
        return Self.feedbackMessage(event)
    }

    /// The event for a token the legacy feedback service reported: reason `Unregistered` (the
    /// app is gone from the device), the service's time in ms since the epoch, no job.
    public static func feedbackServiceEvent(bundleID: String, _ tuple: FeedbackTuple) -> AMQPOutboundMessage {
        feedbackMessage(
            FeedbackEvent(
                bundleId: bundleID, token: DeviceToken(bytes: tuple.deviceToken).hex, reason: APNSReason.unregistered.rawValue,
                timestamp: Int64(tuple.timestamp) * 1000, jobId: nil))
    }

    private static func feedbackMessage(_ event: FeedbackEvent) -> AMQPOutboundMessage {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = event.jobId
        properties.timestamp = nil
        return AMQPOutboundMessage(
            exchange: TopologyNames.feedbackExchange, routingKey: event.bundleId, body: event.jsonBytes(), properties: properties)
    }

    /// The job's properties for a message that carries it on: the properties it arrived with,
    /// byte for byte, less `user_id` and `expiration` (`AMQPProperties.republished`, contract §4)
    /// and the broker's delivery count; an id the parser generated as `message_id`, so it stays
    /// the same for every attempt (contract §2). An id that came with the job (its body's `id`,
    /// or its `message_id`) leaves `message_id` as it arrived.
    func forwardedProperties(_ job: JobContext, _ write: (inout JobEnvelope) -> Void = { _ in }) -> AMQPProperties {
        var properties = job.message.properties.republished {
            $0.forward()
            write(&$0)
        }
        if let generated = job.generatedID { properties.messageID = generated }
        return properties
    }

    /// A delivery the consumer hands back unread (held, paused, stopping): its held copy.
    public func handedBack(_ message: AMQPDeliveredMessage) -> AMQPOutboundMessage {
        heldMessage(job: JobContext(message: message, jobID: message.properties.messageID, token: nil, previousAttempts: 0))
    }

    /// A held job goes back to the end of its work queue as a new message, rather than with a
    /// nack: a nack counts as a delivery on quorum queues, and a job waiting out a provider fault
    /// is no poison job (`DeliveryLimit`).
    func heldMessage(job: JobContext) -> AMQPOutboundMessage {
        AMQPOutboundMessage(
            exchange: "", routingKey: TopologyNames.workQueue(bundleID), body: job.message.body, properties: forwardedProperties(job))
    }

    func retryMessage(job: JobContext, attemptsMade: Int, delay: Duration) -> AMQPOutboundMessage {
        let properties = forwardedProperties(job) { $0.setAttempt(attemptsMade) }
        return AMQPOutboundMessage(
            exchange: "", routingKey: TopologyNames.retryQueue(bundleID, delay: delay),
            body: job.message.body, properties: properties)
    }

    /// The job's dead letter (`JobEnvelope.Failure.deadLetter`, the one builder), with
    /// `forwardedProperties`' rule for an id the parser generated.
    func deadLetter(job: JobContext, reason: String, status: Int, attempts: Int, detail: String, now: Date) -> AMQPOutboundMessage {
        JobEnvelope.Failure(reason: reason, status: status, attempts: attempts, failedAt: now, error: detail).deadLetter(
            properties: job.message.properties, body: job.message.body, queue: TopologyNames.deadQueue(bundleID), messageID: job.generatedID)
    }
}

/// The event on `apns.feedback` for an invalid device token (contract §4), or for a broadcast
/// channel Apple does not know (contract §7): exactly one of `token` and `channel` is set.
public struct FeedbackEvent: Sendable, Hashable, Codable {
    public var bundleId: String
    /// Hexadecimal; nil in a channel's event.
    public var token: String?
    /// The channel id as Apple issued it; nil in a token's event.
    public var channel: String?
    public var reason: String
    /// Apple's timestamp in ms since the epoch, or nil.
    public var timestamp: Int64?
    public var jobId: String?

    public init(bundleId: String, token: String, reason: String, timestamp: Int64?, jobId: String?) {
        self.bundleId = bundleId
        self.token = token
        self.reason = reason
        self.timestamp = timestamp
        self.jobId = jobId
    }

    public init(bundleId: String, channel: String, reason: String, timestamp: Int64?, jobId: String?) {
        self.bundleId = bundleId
        self.channel = channel
        self.reason = reason
        self.timestamp = timestamp
        self.jobId = jobId
    }

    /// JSON with every key present (`timestamp: null` when Apple gave none), keys sorted;
    /// `"channel"` in place of `"token"` for a channel's event.
    public func jsonBytes() -> [UInt8] {
        var object: [String: FlatJSON.Value] = [
            "bundleId": .string(bundleId), "reason": .string(reason),
            "timestamp": timestamp.map { .integer($0) } ?? .null, "jobId": jobId.map { .string($0) } ?? .null,
        ]
        if let channel { object["channel"] = .string(channel) } else { object["token"] = .string(token ?? "") }
        return FlatJSON.object(object)
    }
}
