/// Metrics that are states rather than events, sampled from the worker's status on every
/// `/metrics` scrape so they are current when read (each gauge is made on the first scrape that
/// needs it and recorded again on the later ones): APNs connections by state, whether each
/// bundle's consumer is paused and why (`apns_worker_consumer_paused{bundle,reason}`, `reason`
/// one of `pauseReasons`), whether the device
/// registry is available, and the broker's view of this instance's queues (messages and
/// consumers per bundle and role, the registry's dead queues among them), with fixed label sets
/// (bundle, state, role); and the Prometheus factory settings `apns-worker run` bootstraps
/// swift-metrics with. The alerting rules in deploy/prometheus/ are written against these names.
import APNSModel
import APNSOperations
import APNSWorker
import Metrics
import Prometheus
import Synchronization

public final class AdminMetrics: Sendable {
    /// Latency buckets from 1 ms to 10 s, for APNs round trips and whole jobs alike.
    public static let durationBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]

    /// A Prometheus factory over the collector registry `prometheus` with the worker's histogram
    /// buckets; pass it to `MetricsSystem.bootstrap` once per process.
    public static func factory(prometheus: PrometheusCollectorRegistry) -> PrometheusMetricsFactory {
        var factory = PrometheusMetricsFactory(registry: prometheus)
        factory.defaultDurationHistogramBuckets = durationBuckets
        return factory
    }

    /// A gauge's name and labels, flattened (name, value, name, value…).
    private struct GaugeKey: Hashable {
        var label: String
        var dimensions: [String]
    }

    /// Nil: the factory bootstrapped when a gauge is made, as `Gauge(label:)` reads it.
    private let factory: (any MetricsFactory)?
    /// Every gauge made so far. Their labels are the configured bundles, the connection states
    /// and the queue roles, so once each bundle has been scraped no scrape adds one.
    private let gauges = Mutex<[GaugeKey: Metrics.Gauge]>([:])

    /// Gauges made by `factory`, by default the one bootstrapped (tests give their own to count).
    init(factory: (any MetricsFactory)? = nil) {
        self.factory = factory
    }

    /// The gauge of `label` and `dimensions`, made on first use.
    private func gauge(_ label: String, _ dimensions: [(String, String)] = []) -> Metrics.Gauge {
        let key = GaugeKey(label: label, dimensions: dimensions.flatMap { [$0.0, $0.1] })
        return gauges.withLock { gauges in
            if let gauge = gauges[key] { return gauge }
            let gauge = Metrics.Gauge(label: label, dimensions: dimensions, factory: factory ?? MetricsSystem.factory)
            gauges[key] = gauge
            return gauge
        }
    }

    /// Why a bundle's consumer takes no job, the `reason` label of `apns_worker_consumer_paused`
    /// (one series each, 1 or 0, so both exist for every bundle): `held`, a provider fault the
    /// worker waits out by itself; `operator`, `apns-worker pause` until someone resumes it.
    static let pauseReasons: [(reason: String, isPaused: @Sendable (WorkerStatus.Bundle) -> Bool)] = [
        ("held", { $0.held }), ("operator", { $0.paused }),
    ]

    /// Records the sampled gauges from `status`: the one writer of each.
    func sample(_ status: WorkerStatus) {
        gauge("apns_worker_broker_connected").record(status.brokerConnected ? 1 : 0)
        if let registry = status.registry {
            gauge("apns_worker_registry_available").record(registry == "held" ? 0 : 1)
        }
        for bundle in status.bundles {
            for (reason, isPaused) in Self.pauseReasons {
                gauge("apns_worker_consumer_paused", [("bundle", bundle.bundleID), ("reason", reason)]).record(isPaused(bundle) ? 1 : 0)
            }
            guard !bundle.connections.isEmpty else { continue }
            for state in TransportConnectionState.allCases {
                gauge("apns_transport_connections", [("bundle", bundle.bundleID), ("state", state.rawValue)])
                    .record(bundle.connections[state.rawValue, default: 0])
            }
        }
        // A shared pool once, by name; a pool is made for a credential in the configuration,
        // so the label's values are as many as its credentials × environments.
        for pool in status.pools {
            for state in TransportConnectionState.allCases {
                gauge("apns_transport_pool_connections", [("pool", pool.name), ("state", state.rawValue)])
                    .record(pool.connections[state.rawValue, default: 0])
            }
            gauge("apns_transport_pool_bundles", [("pool", pool.name)]).record(pool.bundles.count)
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
    func sample(_ depths: [QueueDepth]?, bundleIDs: [String], registryQueues: Bool = false) {
        var messages: [String: [String: Int]] = [:]
        var consumers: [String: [String: Int]] = [:]
        for depth in depths ?? [] {
            messages[depth.bundleID, default: [:]][depth.role, default: 0] += depth.messages
            consumers[depth.bundleID, default: [:]][depth.role, default: 0] += depth.consumers
        }
        var keys = bundleIDs.flatMap { bundle in Self.queueRoles.dropLast().map { (bundle, $0) } } + [("", "unrouted")]
        if registryQueues { keys += QueueInspector.registryDeadQueues.map { ("", $0.1) } }
        for (bundle, role) in keys {
            let dimensions = [("bundle", bundle), ("role", role)]
            let known = depths != nil && messages[bundle]?[role] != nil
            gauge("apns_worker_queue_messages", dimensions).record(known ? Double(messages[bundle]![role]!) : .nan)
            gauge("apns_worker_queue_consumers", dimensions).record(known ? Double(consumers[bundle]![role]!) : .nan)
        }
    }
}
