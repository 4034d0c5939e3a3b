import AMQPClient

extension AMQPConnection {
    /// Publishes a test's input as a sync server does: a `basic.nack` says the broker took no
    /// responsibility for the message, and a publisher's answer is to publish it again. RabbitMQ
    /// 3.10 nacks a channel's first publish to a quorum queue when registering the publisher with
    /// the queue's Raft leader times out or finds no leader (`rabbit_fifo_client`), as it can on a
    /// loaded machine; a test must not fail for that, and must not hide anything else.
    public func publishAgainAfterNacks(_ message: AMQPOutboundMessage, attempts: Int = 5) async throws {
        for attempt in 1... {
            do {
                return try await publish(message)
            } catch let error as AMQPError where error.code == .publishNacked && attempt < attempts {
                try await Task.sleep(for: .milliseconds(200 * attempt))
            }
        }
    }
}
