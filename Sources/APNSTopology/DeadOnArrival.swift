import AMQPClient
import APNSModel
import Foundation

/// A message that is dead before its body is read (contract §4): what the connection did not
/// keep of it, and its dead letter. The one check and the one dead letter of the bundle
/// pipelines and the registry's consumers.
public enum DeadOnArrival: Sendable, Hashable {
    /// A body over the limit, never assembled. `copied`: the connection published its dead
    /// letter as it arrived (`oversizedDeadLetter`), confirmed, so the delivery is acked; else
    /// it is rejected for the broker to dead-letter, unchanged.
    case bodyTooLarge(size: UInt64, copied: Bool)
    /// A header table not kept (too large, nested too deep): there is no attempt count to read,
    /// and its dead letter carries the `x-apns-*` headers alone.
    case headerTableDropped(JobError)

    /// What `message` arrived without, or nil for a message kept whole.
    public init?(_ message: AMQPDeliveredMessage) {
        if let size = message.oversizedBodySize {
            self = .bodyTooLarge(size: size, copied: message.oversizedBodyDeadLettered)
        } else if let size = message.oversizedPropertiesSize {
            self = .headerTableDropped(JobError.oversizedProperties(size, limit: AMQPProperties.maximumEncodedSize))
        } else if message.headersNestedTooDeep {
            self = .headerTableDropped(JobError.nestedHeaders(limit: AMQPProperties.maximumHeaderDepth))
        } else {
            return nil
        }
    }

    /// Contract §4's dead letter of a message never tried (`JobEnvelope.Failure.deadLetter`): a
    /// `MalformedJob` failure, status 0, no attempt made, into `queue`.
    public static func deadLetter(properties: AMQPProperties, body: [UInt8], queue: String, error: JobError, now: Date) -> AMQPOutboundMessage {
        JobEnvelope.Failure(reason: JobError.Kind.malformedJob.rawValue, status: 0, attempts: 0, failedAt: now, error: error.description)
            .deadLetter(properties: properties, body: body, queue: queue)
    }

    /// The dead letter of a body over `maxBodyBytes`, for the connection to publish with the
    /// body as it arrives.
    public static func oversizedDeadLetter(queue: String, maxBodyBytes: Int, now: @escaping @Sendable () -> Date) -> AMQPOversizedDeadLetter {
        { properties, size in
            let error = JobError(kind: .malformedJob, field: "body", message: "\(size) bytes, over the \(maxBodyBytes) allowed")
            return deadLetter(properties: properties, body: [], queue: queue, error: error, now: now())
        }
    }
}
