/// The fleet's declarations (contract §5) as `AMQPClient` values: the transient exchange, an
/// admin server's exclusive queue, and the durable pause markers.
import AMQPClient
import APNSModel
import APNSTopologyNames

public enum FleetTopology {
    /// The fleet exchange, and this instance's queue bound to it. Heartbeats older than
    /// `messageTTL` are dropped by the queue too, so an instance that reconnects after a while
    /// is not fed stale news.
    public static func plan(instanceID: String, messageTTL: Duration) -> TopologyPlan {
        let queue = TopologyNames.fleetQueue(instanceID: instanceID)
        return TopologyPlan(
            exchanges: [exchange],
            queues: [QueueDeclaration(name: queue, arguments: ["x-message-ttl": .int(messageTTL.milliseconds)], exclusive: true)],
            bindings: [BindingDeclaration(queue: queue, exchange: TopologyNames.fleetExchange, routingKey: "")])
    }

    /// Transient: heartbeats are worthless after a broker restart, and the pause state lives in
    /// the durable markers, not in messages.
    public static let exchange = ExchangeDeclaration(name: TopologyNames.fleetExchange, kind: .fanout, durable: false)

    /// Whether a bundle ID may name a pause marker: a reverse-DNS name (letters, digits, `.`,
    /// `-`, `_`, at most 200 bytes). Pause and resume refuse anything else rather than make it
    /// into a queue name.
    public static func isPausable(_ bundleID: String) -> Bool {
        !bundleID.isEmpty && bundleID.utf8.count <= TopologyNames.maxBundleIDBytes
            && bundleID.utf8.allSatisfy { byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
            }
    }

    /// The marker of a paused bundle: durable, classic (a quorum queue costs a Raft group for a
    /// flag), and never bound, so it never holds a message.
    public static func pauseMarker(_ bundleID: String) -> QueueDeclaration {
        QueueDeclaration(name: TopologyNames.pauseMarker(bundleID), arguments: ["x-queue-type": .string(QueueType.classic.rawValue)])
    }
}
