import AMQPClient
import Logging

extension QueueInspector {
    /// How many times the messages of a move or purge are looked for again after the broker
    /// may have handed back some whose acks it dropped.
    static let ackCheckPasses = 4

    /// Looks through the queues an operation acked messages in for any of them handed back
    /// (`AckedMessages`: a quorum queue's close overtook the ack) and acks those again, until a
    /// look finds none. Without it a purged job could stay, and a requeued one be in both its
    /// work queue and the queue it was moved from, until the operator tries again.
    ///
    /// The look counts a queue's ready messages, then takes them. What the close handed back
    /// is counted once the broker has applied the closed channel's end, which the operation's
    /// hand-back wait ensures whenever it held other messages of that queue. When it held
    /// none, a message handed back after the count is missed. A `basic.get` before the count
    /// would be a barrier, but a message held on a second channel comes back out of order when
    /// the connection closes, and listings promise the queue's order.
    func ackAgainWhatCameBack(_ acked: AckedMessages, purpose: String) async {
        var pending = acked
        for _ in 0..<Self.ackCheckPasses {
            guard !pending.isEmpty else { return }
            var ackedAgain = AckedMessages()
            var readyAfter: [String: Int] = [:]
            do {
                try await withConnection("\(purpose) check") { connection in
                    for queue in pending.queues {
                        // Only the handed-back messages are kept; the rest are looked at and dropped.
                        var handedBack: [AMQPDelivery] = []
                        let ready = try await scan(connection, queue, cap: nil, cutBodies: false) { delivery, _ in
                            if pending.takeIfHandedBack(delivery.message, from: queue) { handedBack.append(delivery) }
                            return true
                        }.ready
                        var again = 0
                        for delivery in handedBack {
                            if await connection.ack(delivery) == .stale {
                                throw AMQPError(.connectionLost, "the channel of queue '\(queue)' closed before a job was acked again")
                            }
                            ackedAgain.acked(delivery.message, in: queue)
                            again += 1
                        }
                        pending.forget(queue)
                        readyAfter[queue] = ready - again
                    }
                    if !ackedAgain.isEmpty { try? await Task.sleep(for: ackSettleWait) }
                }
            } catch {
                logger.warning(
                    "could not check that the broker kept the operation's acks; a job may still be where it was",
                    metadata: ["operations.purpose": "\(purpose)", "error": "\(error)"])
                return
            }
            await waitForHandBack(readyAfter)
            guard !ackedAgain.isEmpty else { return }
            logger.warning(
                "the broker handed back jobs whose acks it dropped when the operation's channel closed; acked them again",
                metadata: ["operations.purpose": "\(purpose)", "operations.acked_again": "\(ackedAgain.count)"])
            pending = ackedAgain
        }
        logger.error(
            "the broker kept handing back acked jobs; the last ones acked again were not checked and may still be in their queues",
            metadata: ["operations.purpose": "\(purpose)", "operations.jobs": "\(pending.count)"])
    }
}
