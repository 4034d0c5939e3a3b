import AMQPClient
import APNSModel
import APNSTopologyNames
import Foundation

/// The AMQP headers of one job message: the ONE place that reads and writes the headers the
/// worker and the broker put on a job (contract §4): the attempts made so far
/// (`x-apns-attempt`), the quorum queue's delivery count (`x-delivery-count`), the failure of a
/// dead job (`x-apns-reason`, `-status`, `-attempts`, `-failed-at`, `-error`) and the reason an
/// operator's requeue kept (`x-apns-last-reason`), and the producer's W3C trace context
/// (`traceparent`, `tracestate`: `JobEnvelope+Trace.swift`). The worker's pipeline (`OutcomeRouter`,
/// `DeliveryLimit`) and the operator tools (`JobInspection`, `AckedMessages`) go through it.
///
/// Anyone with publish rights can set any of these headers to anything, so every number is
/// validated here, once: a value that is not an integer from 0 to 2^31−1 (an AMQP integer of
/// any width, or a decimal string) counts as absent, so arithmetic on what this type returns
/// cannot overflow. Writers clamp to the same range. `x-apns-failed-at` is read and written by
/// `RFC3339` (not Foundation's ISO 8601 style, which goes through ICU on Linux: a forged header
/// would fault ICU into the worker at the first dead-letter listing); one that is not an RFC 3339
/// date-time of at most `RFC3339.maxBytes` counts as absent. Every other header is carried unchanged;
/// the headers written here replace, on a republished copy, every entry of their key the
/// received table had (`AMQPProperties.setHeaders(_:)`).
public struct JobEnvelope: Sendable, Hashable {
    /// The largest count a header may carry: AMQP's signed 32-bit integer, what the worker writes.
    public static let maximumCount = Int(Int32.max)

    /// Every header of the message, those of other parties included.
    public internal(set) var headers: AMQPTable

    /// The keys a writer of this envelope set or removed, whatever their value was.
    public private(set) var writtenKeys: Set<String> = []

    public init(_ headers: AMQPTable?) {
        self.headers = headers ?? [:]
    }

    /// Sets (nil removes) a header the worker writes.
    mutating func write(_ key: String, _ value: AMQPFieldValue?) {
        headers[key] = value
        writtenKeys.insert(key)
    }

    public static func == (lhs: JobEnvelope, rhs: JobEnvelope) -> Bool { lhs.headers == rhs.headers }
    public func hash(into hasher: inout Hasher) { hasher.combine(headers) }

    public init(_ message: AMQPDeliveredMessage) {
        self.init(message.properties.headers)
    }

    /// The headers for a message's properties: nil when there are none.
    public var amqpHeaders: AMQPTable? { headers.isEmpty ? nil : headers }

    // MARK: - Reading

    /// Attempts made before this delivery (`x-apns-attempt`); nil when absent or invalid.
    public var attempt: Int? { Self.count(headers[JobHeaders.attempt]) }
    /// Attempts made before this delivery, 0 when the header is absent or invalid.
    public var previousAttempts: Int { attempt ?? 0 }
    /// Earlier deliveries as a quorum queue counts them (`x-delivery-count`); nil when absent or invalid.
    public var deliveryCount: Int? { Self.count(headers[JobHeaders.deliveryCount]) }
    /// The failure recorded on a dead job.
    public var reason: String? { headers[JobHeaders.reason]?.stringValue }
    public var status: Int? { Self.count(headers[JobHeaders.status]) }
    /// Attempts made in all when the job died (`x-apns-attempts`); nil when absent or invalid.
    public var attempts: Int? { Self.count(headers[JobHeaders.attempts]) }
    /// When the worker ended the job (`x-apns-failed-at`); nil when absent or not RFC 3339.
    public var failedAt: Date? { headers[JobHeaders.failedAt]?.stringValue.flatMap(RFC3339.date(from:)) }
    public var error: String? { headers[JobHeaders.error]?.stringValue }
    /// The reason the job had when an operator last requeued it.
    public var lastReason: String? { headers[JobHeaders.lastReason]?.stringValue }

    // MARK: - Dead-lettered by the broker

    /// The reason a dead message failed: the worker's `x-apns-reason`, or, for a message the
    /// broker dead-lettered because the worker rejected it (`x-death`, reason `rejected`),
    /// `MessageTooLarge`: the worker rejects without requeue only a message over its size
    /// limit, whose body it never kept (docs/decisions.md, "Oversized messages").
    public var failureReason: String? { reason ?? (rejectedByWorker ? Self.messageTooLarge : nil) }
    /// When it failed: `x-apns-failed-at`, or when the broker dead-lettered a rejected message.
    public var failureTime: Date? { failedAt ?? (rejectedByWorker ? lastDeath?.time : nil) }
    /// One line about the failure: `x-apns-error`, or what a rejected message went through.
    public var failureDetail: String? {
        if let error { return error }
        guard rejectedByWorker else { return nil }
        let from = lastDeath?.queue.map { " from \($0)" } ?? ""
        return "larger than the worker's limit for its queue: rejected unread, dead-lettered by the broker\(from), body unchanged"
    }

    public static let messageTooLarge = "MessageTooLarge"
    /// RabbitMQ's `x-death` reason for a message rejected (or nacked) without requeue.
    public static let rejectedDeathReason = "rejected"

    /// No worker failure headers, and the broker's most recent dead-lettering was a rejection.
    var rejectedByWorker: Bool { reason == nil && lastDeath?.reason == Self.rejectedDeathReason }

    /// The broker's most recent dead-lettering of this message: the first entry of `x-death`
    /// (RabbitMQ keeps it most recent first, on 3.10 as on 4.x), or `x-last-death-reason`
    /// (3.13 and later) when `x-death` is not there. Anyone can forge these headers; they only
    /// ever name a reason in a listing.
    public var lastDeath: (reason: String, queue: String?, time: Date?)? {
        if case .array(let deaths)? = headers[Self.deathHeader], case .table(let death)? = deaths.first,
            let reason = death["reason"]?.stringValue
        {
            var time: Date?
            if case .timestamp(let date)? = death["time"] { time = date }
            return (reason, death["queue"]?.stringValue, time)
        }
        guard let reason = headers[Self.lastDeathReasonHeader]?.stringValue else { return nil }
        return (reason, headers[Self.lastDeathQueueHeader]?.stringValue, nil)
    }

    static let deathHeader = "x-death"
    static let lastDeathReasonHeader = "x-last-death-reason"
    static let lastDeathQueueHeader = "x-last-death-queue"

    /// A header's value as a count (contract §4): an integer, or a decimal string, from 0 to
    /// 2^31−1; anything else is nil.
    /// A key the received table repeats was read as the largest of its counts
    /// (`AMQPFieldValue.kept(ofRepeated:_:)`).
    public static func count(_ value: AMQPFieldValue?) -> Int? {
        value?.countValue
    }

    // MARK: - Writing

    /// For a message that carries the job on (retry, dead letter, held job sent back): the
    /// broker's delivery count is dropped, so a count always belongs to the delivery it came with.
    public mutating func forward() {
        if headers[JobHeaders.deliveryCount] != nil { write(JobHeaders.deliveryCount, nil) }
    }

    /// Sets the attempts made so far (clamped to 0...2^31−1).
    public mutating func setAttempt(_ attempts: Int) {
        write(JobHeaders.attempt, .int32(Self.clamped(attempts)))
    }

    /// What a dead letter says about the failure (contract §4).
    public struct Failure: Sendable, Hashable {
        public var reason: String
        /// Apple's HTTP status or binary status code; 0 when Apple was not asked.
        public var status: Int
        public var attempts: Int
        public var failedAt: Date
        /// One human-readable line (cut to one line and 500 characters when written).
        public var error: String

        public init(reason: String, status: Int, attempts: Int, failedAt: Date, error: String) {
            self.reason = reason
            self.status = status
            self.attempts = attempts
            self.failedAt = failedAt
            self.error = error
        }
    }

    /// Writes the failure headers of a dead letter.
    public mutating func record(_ failure: Failure) {
        write(JobHeaders.reason, .string(failure.reason))
        write(JobHeaders.status, .int32(Self.clamped(failure.status)))
        write(JobHeaders.attempts, .int32(Self.clamped(failure.attempts)))
        write(JobHeaders.failedAt, .string(RFC3339.string(from: failure.failedAt)))
        write(JobHeaders.error, .string(Self.oneLine(failure.error)))
    }

    /// Headers the worker (or the broker) writes about a failure or a delivery; a requeued job
    /// starts afresh without them, so a later listing never shows a stale failure.
    public static let clearedOnRequeue: Set<String> = [
        JobHeaders.attempt, JobHeaders.reason, JobHeaders.status, JobHeaders.attempts,
        JobHeaders.failedAt, JobHeaders.error, JobHeaders.deliveryCount,
    ]

    /// An operator's requeue: attempts start again, the failure headers go, and the reason it
    /// failed with is kept in `x-apns-last-reason` (an earlier one when this failure has none).
    public mutating func requeue() {
        let reason = headers[JobHeaders.reason] ?? (rejectedByWorker ? .string(Self.messageTooLarge) : nil)
        for name in Self.clearedOnRequeue { write(name, nil) }
        if let reason { write(JobHeaders.lastReason, reason) }
    }

    /// Header values are read by people in a list: one line, bounded length.
    public static func oneLine(_ text: String) -> String {
        let flat = text.split(whereSeparator: \.isNewline).joined(separator: " ")
        return flat.count > 500 ? String(flat.prefix(497)) + "..." : flat
    }

    private static func clamped(_ value: Int) -> Int32 {
        Int32(min(max(value, 0), maximumCount))
    }
}

extension AMQPProperties {
    /// The envelope's headers on these properties: each header it wrote replaces every entry of
    /// its key the received table had, so a republished copy carries one value for it, the
    /// worker's; the publisher's other entries go out as they arrived (contract §4).
    public mutating func setHeaders(_ envelope: JobEnvelope) {
        setHeaders(envelope.amqpHeaders, writing: envelope.writtenKeys)
    }

    /// These properties as a copy carries them on (`republished`: less `user_id` and
    /// `expiration`, contract §4), with the job's envelope read from their headers, changed by
    /// `change`, and written back: the one way a retry, a hand-back, a dead letter and a requeue
    /// make their properties.
    public func republished(changingEnvelope change: (inout JobEnvelope) -> Void) -> AMQPProperties {
        var copy = republished()
        var envelope = JobEnvelope(copy.headers)
        change(&envelope)
        copy.setHeaders(envelope)
        return copy
    }
}

extension JobEnvelope.Failure {
    /// Contract §4's dead letter, the one builder of every dead letter the worker writes (a job
    /// the router gives up on, a message dead on arrival): `body` into `queue`, its properties as
    /// a copy carries them on (`republished(changingEnvelope:)`) with this failure's `x-apns-*`
    /// headers. `messageID`, when given, replaces the `message_id` it arrived with (the router's:
    /// the id its parser generated, the same for every copy of the job).
    public func deadLetter(properties: AMQPProperties, body: [UInt8], queue: String, messageID: String? = nil) -> AMQPOutboundMessage {
        var copy = properties.republished {
            $0.forward()
            $0.record(self)
        }
        if let messageID { copy.messageID = messageID }
        return AMQPOutboundMessage(exchange: "", routingKey: queue, body: body, properties: copy)
    }
}
