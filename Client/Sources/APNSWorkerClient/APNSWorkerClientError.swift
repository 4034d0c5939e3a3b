/// The one error type of APNSWorkerClient: an enum a sync server can switch on to decide between
/// fixing the message (`invalidMessage`, `payloadTooLarge`, `encodingFailed`), trying again later
/// (`notConfirmed`, `connectionUnavailable`) and giving up (`closed`, `broker`).
import AMQPClient
import APNSModel

public enum APNSWorkerClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The worker would dead-letter the message as `MalformedJob`: its field and the worker's own message.
    case invalidMessage(JobError)
    /// The payload is larger, as sent, than Apple accepts for its push type (4096 bytes, 5120 for
    /// `voip` and broadcasts; contract §2): the worker would dead-letter it as `PayloadTooLarge`.
    case payloadTooLarge(JobError)
    /// A payload or `userInfo` value could not be encoded as a JSON object (`JSONEncoder` refused
    /// it, e.g. a non-finite Double, or it encodes to something other than an object).
    case encodingFailed(String)
    /// The broker did not take responsibility for the message (`basic.nack`, or it was
    /// unroutable and returned): it may or may not be worth publishing again.
    case notConfirmed(String)
    /// No connection to the broker came back within the publish deadline; nothing was confirmed.
    case connectionUnavailable(waited: Duration, lastError: String)
    /// The client was closed (`close()`).
    case closed
    /// Anything else the broker said (e.g. 403 access refused, 404 no such exchange).
    case broker(String)

    public var description: String {
        switch self {
        case .invalidMessage(let error), .payloadTooLarge(let error): "\(error.field): \(error.message)"
        case .encodingFailed(let why): "cannot encode as JSON: \(why)"
        case .notConfirmed(let why): "the broker did not confirm the message: \(why)"
        case .connectionUnavailable(let waited, let last): "no broker connection within \(waited): \(last)"
        case .closed: "the client is closed"
        case .broker(let why): why
        }
    }

    /// The worker's verdict on a message, as the client's error.
    static func refused(_ error: JobError) -> APNSWorkerClientError {
        error.kind == .payloadTooLarge ? .payloadTooLarge(error) : .invalidMessage(error)
    }

    /// An `AMQPError` from a publish or declaration, as the client's error; nil when the
    /// connection was down (the caller waits for a reconnect, up to its deadline).
    static func classify(_ error: AMQPError) -> APNSWorkerClientError? {
        switch error.code {
        case .notConnected, .connectionLost, .connectionClosedByServer, .connectionFailed: nil
        case .publishNacked, .publishReturned: .notConfirmed(error.description)
        case .closed: .closed
        default: .broker(error.description)
        }
    }
}

extension AMQPConsumer.Iterator {
    /// The next delivery of an event consumer (feedback, delivery events); a consumer that
    /// failed is said as the client's error.
    mutating func nextDelivery() async throws -> AMQPDelivery? {
        do {
            return try await next()
        } catch let error as AMQPError {
            throw APNSWorkerClientError.classify(error) ?? .broker(error.description)
        }
    }
}
