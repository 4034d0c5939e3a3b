import AMQPClient
import APNSJSON
import APNSModel
import APNSOutcome
import APNSTopology
import APNSTopologyNames
import Foundation

/// Delivery events (contract §8), with no IO: the event a route's end produces, for the jobs
/// whose sender asked for it. The pipeline publishes it beside the route's own message, both
/// confirmed before the job's ack.
extension OutcomeRouter {
    /// What an event says beyond the job's identity, gathered where the end was reached.
    public struct EventFacts: Sendable, Hashable {
        public var reason: String?
        public var status: Int
        /// Attempts at Apple, this one included; 0 when Apple was never asked.
        public var attempts: Int
        public var apnsID: String?
        public var apnsUniqueID: String?
        public var environment: APNSEnvironment
        public var groupJobID: String?

        public init(
            reason: String?, status: Int, attempts: Int, apnsID: String? = nil, apnsUniqueID: String? = nil,
            environment: APNSEnvironment, groupJobID: String? = nil
        ) {
            self.reason = reason
            self.status = status
            self.attempts = attempts
            self.apnsID = apnsID
            self.apnsUniqueID = apnsUniqueID
            self.environment = environment
            self.groupJobID = groupJobID
        }
    }

    /// The level a job is held to: its own `events` field, else the bundle's.
    public func eventLevel(of job: Job?) -> DeliveryEventLevel { job?.events ?? events }

    /// The event of a job that reached `end`, or nil when its level does not want one (or the end
    /// is none of contract §4's: held, gated).
    public func event(
        end: JobEnd, level: DeliveryEventLevel, job: JobContext, facts: EventFacts, now: Date
    ) -> AMQPOutboundMessage? {
        guard let eventEnd = DeliveryEvent.End(end), level.wants(eventEnd) else { return nil }
        let event = DeliveryEvent(
            // A job whose id could not be read (no body id, no message_id) gets one here, as
            // section 2 gives an id to a job without one.
            jobId: job.jobID ?? UUID().uuidString, bundleId: bundleID, end: eventEnd, reason: facts.reason, status: facts.status,
            apnsId: facts.apnsID, apnsUniqueId: facts.apnsUniqueID, attempts: facts.attempts, at: now, target: job.target,
            environment: facts.environment, groupJobId: facts.groupJobID)
        return Self.eventMessage(event)
    }

    /// The message of an event. Not mandatory: with no queue bound (nobody asked yet) the broker
    /// drops it, and a returned event must not hold its job forever.
    public static func eventMessage(_ event: DeliveryEvent) -> AMQPOutboundMessage {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = event.messageID
        properties.timestamp = nil
        return AMQPOutboundMessage(
            exchange: TopologyNames.eventsExchange, routingKey: event.routingKey, body: event.jsonBytes(), properties: properties,
            mandatory: false)
    }

    /// The facts of a job Apple answered, for the end its route reached.
    public static func answeredFacts(
        _ result: TransportResult, outcome: Outcome, end: JobEnd, job: Job, attempts: Int
    ) -> EventFacts {
        var status = 0
        var apnsID: String?
        var uniqueID: String?
        switch result {
        case .http(let answer):
            status = answer.status
            apnsID = answer.apnsID.map { $0.uuidString.lowercased() }
            uniqueID = answer.uniqueID
        case .binaryRejected(let code): status = Int(code)
        case .binaryAccepted, .failed: break
        }
        let reason: String?
        switch outcome {
        case .delivered: reason = nil
        case .invalidToken(let why, _), .held(let why, _): reason = why
        case .dead(let why, _, _): reason = why
        case .retry(let why, let retryStatus):
            // A retryable answer with no attempt left is dead for that reason (`route`).
            reason = end == .dead ? retriesExhausted : why
            if status == 0 { status = retryStatus }
        }
        var groupJobID: String?
        // A group job's fan-out writes a UUID there (contract §6); anyone else's job may carry any
        // value, which the event does not repeat (the schema and the client take a UUID only).
        if case .string(let id)? = job.userInfo["groupJobId"], JobParser.canonicalUUID(id) != nil { groupJobID = id }
        return EventFacts(
            reason: reason, status: status, attempts: attempts, apnsID: apnsID, apnsUniqueID: uniqueID,
            environment: job.environment, groupJobID: groupJobID)
    }

    /// The facts of a job settled unsent (too large, malformed, poison): what its dead letter
    /// says (`x-apns-reason`, `x-apns-status`, `x-apns-attempts`), or for a job over the size
    /// limit, whose dead letter the connection made, the same facts (`oversizedDeadLetter`).
    public static func unsentFacts(_ route: Route, environment: APNSEnvironment) -> EventFacts {
        if case .publishThenAck(let deadLetter, _) = route {
            let envelope = JobEnvelope(deadLetter.properties.headers)
            return EventFacts(
                reason: envelope.reason, status: envelope.status ?? 0, attempts: envelope.attempts ?? 0, environment: environment)
        }
        let reason = route == .rejectToDeadLetter ? JobEnvelope.messageTooLarge : JobError.Kind.malformedJob.rawValue
        return EventFacts(reason: reason, status: 0, attempts: 0, environment: environment)
    }
}
