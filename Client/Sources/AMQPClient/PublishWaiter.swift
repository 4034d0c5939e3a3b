// Who waits for a publish's confirm on the owner thread: one caller's continuation, or one
// message of a batch (`AMQPConnection.publish(_:)` of many), whose caller is resumed once, when
// the broker has settled every message of it: one wake-up and one resumption for the batch
// where each message cost both.

/// A publish in flight's caller, resumed (or told) once the broker settles it.
enum PublishWaiter {
    case one(CheckedContinuation<Void, any Error>)
    /// The message at this index of the batch.
    case batch(PublishBatch, Int)

    /// The broker settled the publish: nil when it took it, else why not.
    func settle(_ error: AMQPError?) {
        switch self {
        case .one(let continuation):
            if let error { continuation.resume(throwing: error) } else { continuation.resume() }
        case .batch(let batch, let index):
            batch.settle(index, error)
        }
    }
}

/// The results of a batch of publishes, filled in as the broker settles them; its caller is
/// resumed with all of them when the last one is settled. Owner thread only (the driver's).
final class PublishBatch {
    private var results: [AMQPError?]
    private var unsettled: Int
    private let continuation: CheckedContinuation<[AMQPError?], Never>

    init(count: Int, continuation: CheckedContinuation<[AMQPError?], Never>) {
        results = Array(repeating: nil, count: count)
        unsettled = count
        self.continuation = continuation
        if count == 0 { continuation.resume(returning: []) }
    }

    func settle(_ index: Int, _ error: AMQPError?) {
        results[index] = error
        unsettled -= 1
        if unsettled == 0 { continuation.resume(returning: results) }
    }
}
