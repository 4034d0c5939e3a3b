// A declaration that waits out the refusals that pass by themselves (`AMQPError.isTransient`).
import Logging

extension TopologyDeclaring {
    /// `declare(plan)`, declared again while the broker's refusal is transient
    /// (`AMQPError.isTransient`), said once as a warning; any other error is thrown, and so is
    /// cancellation (a shutdown while the node is not ready). The waits between attempts grow
    /// as `backoff` says: a node that refuses because it is too busy to form a quorum queue's
    /// Raft group recovers sooner when every client asks less often.
    public func declareWaitingForTheBroker(
        _ plan: TopologyPlan, logger: Logger, backoff: AMQPBackoff = AMQPBackoff(initial: .seconds(1), maximum: .seconds(15))
    ) async throws {
        var told = false
        var attempt = 0
        var random = SystemRandomNumberGenerator()
        while true {
            do {
                try await declare(plan)
                if told { logger.notice("AMQP topology declared: the broker is ready again") }
                return
            } catch let error as AMQPError where error.isTransient {
                if !told {
                    logger.warning("AMQP broker not ready to declare the topology: declaring again until it is", metadata: ["amqp.error": "\(error)"])
                    told = true
                }
                try await Task.sleep(for: backoff.delay(attempt: attempt, using: &random))
                attempt += 1
            }
        }
    }
}
