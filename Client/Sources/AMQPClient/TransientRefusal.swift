// A declaration that waits out the refusals that pass by themselves (`AMQPError.isTransient`).
import Logging

extension TopologyDeclaring {
    /// `declare(plan)`, declared again every `retryEvery` while the broker's refusal is
    /// transient (`AMQPError.isTransient`), said once as a warning; any other error is thrown,
    /// and so is cancellation (a shutdown while the node is not ready).
    public func declareWaitingForTheBroker(_ plan: TopologyPlan, logger: Logger, retryEvery: Duration = .seconds(1)) async throws {
        var told = false
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
                try await Task.sleep(for: retryEvery)
            }
        }
    }
}
