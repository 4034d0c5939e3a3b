/// Metrics that are states rather than events, sampled from the worker's status on every
/// `/metrics` scrape so they are current when read: APNs connections by state, whether each
/// bundle's consumer is paused by a provider fault (held) or by an operator, whether the device
/// registry is available, and the broker's view of this instance's queues (messages and
/// consumers per bundle and role, the registry's dead queues among them), with fixed label sets
/// (bundle, state, role); and the Prometheus factory settings `apns-worker run` bootstraps
/// swift-metrics with. The alerting rules in deploy/prometheus/ are written against these names.
import APNSModel
import APNSOperations
import APNSWorker
import Metrics
import Prometheus

public enum AdminMetrics {
    /// Latency buckets from 1 ms to 10 s, for APNs round trips and whole jobs alike.
    public static let durationBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]

    /// A Prometheus factory over `registry` with the worker's histogram buckets; pass it to
    /// `MetricsSystem.bootstrap` once per process.
    public static func factory(registry: PrometheusCollectorRegistry) -> PrometheusMetricsFactory {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = durationBuckets
        return factory
    }

    /// Records the sampled gauges from `status`.
    static func sample(_ status: WorkerStatus) {
        Gauge(label: "apns_worker_broker_connected").record(status.brokerConnected ? 1 : 0)
        if let registry = status.registry {
            Gauge(label: "apns_worker_registry_available").record(registry == "held" ? 0 : 1)
        }
        for bundle in status.bundles {
            Gauge(label: "apns_worker_consumer_paused", dimensions: [("bundle", bundle.bundleID)]).record(bundle.held ? 1 : 0)
            Gauge(label: "apns_worker_bundle_paused_by_operator", dimensions: [("bundle", bundle.bundleID)]).record(bundle.paused ? 1 : 0)
            guard !bundle.connections.isEmpty else { continue }
            for state in TransportConnectionState.allCases {
                Gauge(label: "apns_transport_connections", dimensions: [("bundle", bundle.bundleID), ("state", state.rawValue)])
                    .record(bundle.connections[state.rawValue, default: 0])
            }
        }
    }

    /// The queue roles whose depths are exported, retry queues (one per delay) summed.
    static let queueRoles = ["work", "retry", "dead", "unrouted"]

    /// Records messages and consumers per bundle and role from the broker's answer. When the
    /// depths could not be read (`depths` nil: the broker is down), every value this instance
    /// exported before becomes NaN rather than keeping its last number: PromQL comparisons with
    /// NaN are false, so no alert fires on a depth nobody has read. With `registryQueues` (the
    /// worker runs a `[registry]`), the registry's and groups' dead queues are exported too,
    /// with bundle "" as `apns.unrouted` is.
    static func sample(_ depths: [QueueDepth]?, bundleIDs: [String], registryQueues: Bool = false) {
        var messages: [String: [String: Int]] = [:]
        var consumers: [String: [String: Int]] = [:]
        for depth in depths ?? [] {
            messages[depth.bundleID, default: [:]][depth.role, default: 0] += depth.messages
            consumers[depth.bundleID, default: [:]][depth.role, default: 0] += depth.consumers
        }
        var keys = bundleIDs.flatMap { bundle in queueRoles.dropLast().map { (bundle, $0) } } + [("", "unrouted")]
        if registryQueues { keys += QueueInspector.registryDeadQueues.map { ("", $0.1) } }
        for (bundle, role) in keys {
            let dimensions = [("bundle", bundle), ("role", role)]
            let known = depths != nil && messages[bundle]?[role] != nil
            Gauge(label: "apns_worker_queue_messages", dimensions: dimensions).record(known ? Double(messages[bundle]![role]!) : .nan)
            Gauge(label: "apns_worker_queue_consumers", dimensions: dimensions).record(known ? Double(consumers[bundle]![role]!) : .nan)
        }
    }
}
