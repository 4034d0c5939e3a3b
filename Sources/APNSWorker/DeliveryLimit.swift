import AMQPClient
import APNSTopology

/// Poison jobs (contract §4): a job that crashes or stalls every worker that takes it comes back
/// forever and takes the fleet down in turn. Once it has been delivered more than
/// `maxDeliveries` times without reaching an end, it is dead-lettered before anything else is
/// done with it.
///
/// How deliveries are counted, with no IO:
/// - quorum queues: the broker's `x-delivery-count` header (absent on the first delivery, then
///   the number of earlier deliveries), which survives the crash of every worker;
/// - classic queues have no such count: a redelivered job is counted by this worker, keyed by its
///   message id or, without one, by its body. Such a count starts again in every process, so on
///   classic queues the limit catches jobs that stall a worker, not jobs that kill it.
///
/// The worker strips `x-delivery-count` from every message it publishes (retry, dead letter,
/// held job sent back), so a count always belongs to the delivery it arrived with.
public struct DeliveryLimit: Sendable {
    public let maxDeliveries: Int
    /// Redeliveries seen by this worker on classic queues, oldest first, bounded.
    private var seen: [Int: Int] = [:]
    private var order: [Int] = []
    private var orderStart = 0
    static let rememberedJobs = 10_000

    public init(maxDeliveries: Int) {
        self.maxDeliveries = max(maxDeliveries, 1)
    }

    /// How many times this message has been delivered, this delivery included.
    public mutating func deliveries(of message: AMQPDeliveredMessage) -> Int {
        // Within 0...2^31−1 (`JobEnvelope`), so adding this delivery cannot overflow.
        if let earlier = JobEnvelope(message).deliveryCount {
            return earlier + 1
        }
        guard message.redelivered else { return 1 }
        var hasher = Hasher()
        if let id = message.properties.messageID {
            hasher.combine(id)
        } else {
            hasher.combine(message.body)
        }
        let key = hasher.finalize()
        if let count = seen[key] {
            seen[key] = count + 1
            return count + 2
        }
        remember(key)
        // Redelivered, but the first time this worker sees it: at least the second delivery.
        return 2
    }

    private mutating func remember(_ key: Int) {
        seen[key] = 1
        order.append(key)
        if seen.count > Self.rememberedJobs {
            seen[order[orderStart]] = nil
            orderStart += 1
            if orderStart > Self.rememberedJobs {
                order.removeFirst(orderStart)
                orderStart = 0
            }
        }
    }
}
