import AMQPClient
import APNSCore
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
/// cannot overflow. Writers clamp to the same range. Every other header is carried unchanged.
public struct JobEnvelope: Sendable, Hashable {
    /// The largest count a header may carry: AMQP's signed 32-bit integer, what the worker writes.
    public static let maximumCount = Int(Int32.max)

    /// Every header of the message, those of other parties included.
    public internal(set) var headers: AMQPTable

    public init(_ headers: AMQPTable?) {
        self.headers = headers ?? [:]
    }

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
    public var failedAt: Date? { headers[JobHeaders.failedAt]?.stringValue.flatMap(Self.parseRFC3339) }
    public var error: String? { headers[JobHeaders.error]?.stringValue }
    /// The reason the job had when an operator last requeued it.
    public var lastReason: String? { headers[JobHeaders.lastReason]?.stringValue }

    /// A header's value as a count (contract §4): an integer, or a decimal string, from 0 to
    /// 2^31−1; anything else is nil.
    public static func count(_ value: AMQPFieldValue?) -> Int? {
        guard let value else { return nil }
        let number: Int64?
        if let int = value.intValue {
            number = int
        } else if let string = value.stringValue, string.utf8.count <= 11 {
            number = Int64(string)
        } else {
            number = nil
        }
        guard let number, (0...Int64(maximumCount)).contains(number) else { return nil }
        return Int(number)
    }

    /// RFC 3339 with or without fractional seconds (the worker writes `.iso8601`, without).
    public static func parseRFC3339(_ text: String) -> Date? {
        // Longer than any RFC 3339 time: not worth a parser's time.
        guard text.utf8.count <= 64 else { return nil }
        if let date = try? Date(text, strategy: .iso8601) { return date }
        return try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    // MARK: - Writing

    /// For a message that carries the job on (retry, dead letter, held job sent back): the
    /// broker's delivery count is dropped, so a count always belongs to the delivery it came with.
    public mutating func forward() {
        if headers[JobHeaders.deliveryCount] != nil { headers[JobHeaders.deliveryCount] = nil }
    }

    /// Sets the attempts made so far (clamped to 0...2^31−1).
    public mutating func setAttempt(_ attempts: Int) {
        headers[JobHeaders.attempt] = .int32(Self.clamped(attempts))
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
        headers[JobHeaders.reason] = .string(failure.reason)
        headers[JobHeaders.status] = .int32(Self.clamped(failure.status))
        headers[JobHeaders.attempts] = .int32(Self.clamped(failure.attempts))
        headers[JobHeaders.failedAt] = .string(failure.failedAt.formatted(.iso8601))
        headers[JobHeaders.error] = .string(Self.oneLine(failure.error))
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
        let reason = headers[JobHeaders.reason]
        for name in Self.clearedOnRequeue { headers[name] = nil }
        if let reason { headers[JobHeaders.lastReason] = reason }
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
