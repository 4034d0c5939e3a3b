import AMQPClient

/// What a failed operator operation on the queues means, for whoever answers for it (the
/// admin's status code). Only a broker that cannot be reached, or whose link broke, is an
/// outage that goes away by waiting; a broker that answered and refused, or a job's work queue
/// that does not exist, repeats until someone changes something, and saying "unavailable, try
/// later" would send the operator the wrong way.
public enum OperationFailure: Sendable, Hashable {
    /// No broker answered, or the connection or its link broke (`AMQPError.isTransient`, closed,
    /// librabbitmq failures, a consumer the broker cancelled when its node went): try later.
    case brokerUnavailable
    /// A job's work queue does not exist: the broker returned the mandatory publish that moved
    /// it (`publishReturned`), and the jobs not yet moved stay where they were.
    case noWorkQueue
    /// The broker refused the operation (a channel exception: a queue another connection holds
    /// exclusively, access refused, a queue deleted meanwhile; a declaration that conflicts).
    case brokerRefused
    /// A name longer than an AMQP short string, from the request.
    case invalidName
    /// Not a broker failure: a fault of the worker's own.
    case unexpected

    public init(_ error: any Error) {
        guard let error = error as? AMQPError else {
            self = .unexpected
            return
        }
        switch error.code {
        case .publishReturned: self = .noWorkQueue
        case .channelClosed, .declarationConflict: self = .brokerRefused
        case .invalidName: self = .invalidName
        case .invalidURL: self = .unexpected
        // The link and whatever a future code names: waiting is the safe advice.
        default: self = .brokerUnavailable
        }
    }
}
