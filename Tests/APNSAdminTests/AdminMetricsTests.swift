/// The gauges `/metrics` samples are made once: a second scrape makes none and records the values
/// of its own status and depths. Counted with a metrics factory of the test's, no server.
@testable import APNSAdmin
import APNSModel
import APNSOperations
import APNSWorker
import Metrics
import Synchronization
import Testing

/// Counts the recorders (gauges) it makes and keeps the last value each one recorded.
final class CountingMetricsFactory: MetricsFactory, Sendable {
    final class LastValue: RecorderHandler, Sendable {
        let value = Mutex<Double?>(nil)
        func record(_ value: Int64) { self.value.withLock { $0 = Double(value) } }
        func record(_ value: Double) { self.value.withLock { $0 = value } }
    }

    private let made = Mutex<[(key: String, recorder: LastValue)]>([])

    static func key(_ label: String, _ dimensions: [(String, String)]) -> String {
        ([label] + dimensions.sorted { $0.0 < $1.0 }.map { "\($0.0)=\($0.1)" }).joined(separator: ",")
    }

    var recordersMade: Int { made.withLock { $0.count } }

    /// What the last gauge made for `label` and `dimensions` recorded last.
    func value(_ label: String, _ dimensions: [(String, String)] = []) -> Double? {
        let key = Self.key(label, dimensions)
        return made.withLock { made in made.last { $0.key == key }?.recorder.value.withLock { $0 } }
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        let recorder = LastValue()
        made.withLock { $0.append((Self.key(label, dimensions), recorder)) }
        return recorder
    }

    // `AdminMetrics` makes gauges only.
    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler { NOOPMetricsHandler.instance }
    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler { NOOPMetricsHandler.instance }
    func destroyCounter(_ handler: any CounterHandler) {}
    func destroyRecorder(_ handler: any RecorderHandler) {}
    func destroyTimer(_ handler: any TimerHandler) {}
}

@Suite struct AdminMetricsTests {
    static func status(held: Bool, ready: Int, registry: String) -> WorkerStatus {
        var connections = Dictionary(uniqueKeysWithValues: TransportConnectionState.allCases.map { ($0.rawValue, 0) })
        connections[TransportConnectionState.ready.rawValue] = ready
        var status = WorkerStatus(
            broker: "connected",
            bundles: ["com.example.a", "com.example.b"].map { bundle in
                WorkerStatus.Bundle(
                    bundleID: bundle, held: held, activity: WorkerStatistics().activity(bundle: bundle), connections: connections)
            })
        status.registry = registry
        return status
    }

    @Test func aSecondScrapeOfTheStatusMakesNoGaugeAndRecordsItsOwnValues() {
        let factory = CountingMetricsFactory()
        let metrics = AdminMetrics(factory: factory)
        metrics.sample(Self.status(held: true, ready: 2, registry: "held"))
        // Broker and registry, and per bundle: two pause gauges and one per connection state.
        let made = factory.recordersMade
        #expect(made == 2 + 2 * (2 + TransportConnectionState.allCases.count))
        #expect(factory.value("apns_worker_consumer_paused", [("bundle", "com.example.a"), ("reason", "held")]) == 1)
        #expect(factory.value("apns_worker_consumer_paused", [("bundle", "com.example.a"), ("reason", "operator")]) == 0)
        #expect(factory.value("apns_worker_registry_available") == 0)

        metrics.sample(Self.status(held: false, ready: 5, registry: "ok"))
        #expect(factory.recordersMade == made)
        #expect(factory.value("apns_worker_consumer_paused", [("bundle", "com.example.a"), ("reason", "held")]) == 0)
        #expect(factory.value("apns_worker_registry_available") == 1)
        #expect(factory.value("apns_transport_connections", [("bundle", "com.example.b"), ("state", "ready")]) == 5)
        #expect(factory.value("apns_transport_connections", [("bundle", "com.example.b"), ("state", "idle")]) == 0)
    }

    /// A pool shared by two bundles: its connections once under its name, with the count of
    /// bundles using it; the pooled bundles report none of their own (no double count).
    @Test func aSharedPoolIsOneSeriesPerStateNotOnePerBundle() {
        let factory = CountingMetricsFactory()
        let metrics = AdminMetrics(factory: factory)
        var status = WorkerStatus(
            broker: "connected",
            bundles: ["com.example.a", "com.example.b"].map { bundle in
                WorkerStatus.Bundle(bundleID: bundle, held: false, activity: WorkerStatistics().activity(bundle: bundle), connections: [:])
            })
        var connections = Dictionary(uniqueKeysWithValues: TransportConnectionState.allCases.map { ($0.rawValue, 0) })
        connections[TransportConnectionState.ready.rawValue] = 2
        let pool = "token TEAM1/KEY1#0123abcd production api.push.apple.com:443"
        status.pools = [WorkerStatus.Pool(name: pool, environment: "production", bundles: ["com.example.a", "com.example.b"], connections: connections)]
        metrics.sample(status)
        // Broker, two pause gauges per bundle, the pool's states and its bundle count.
        #expect(factory.recordersMade == 1 + 2 * 2 + TransportConnectionState.allCases.count + 1)
        #expect(factory.value("apns_transport_pool_connections", [("pool", pool), ("state", "ready")]) == 2)
        #expect(factory.value("apns_transport_pool_connections", [("pool", pool), ("state", "idle")]) == 0)
        #expect(factory.value("apns_transport_pool_bundles", [("pool", pool)]) == 2)
        #expect(factory.value("apns_transport_connections", [("bundle", "com.example.a"), ("state", "ready")]) == nil)
    }

    @Test func aSecondScrapeOfTheDepthsMakesNoGaugeAndRecordsItsOwnValues() {
        let factory = CountingMetricsFactory()
        let metrics = AdminMetrics(factory: factory)
        let bundle = "com.example.depths"
        metrics.sample(
            [QueueDepth(queue: "apns.\(bundle)", bundleID: bundle, role: "work", messages: 7, consumers: 2)], bundleIDs: [bundle],
            registryQueues: true)
        // Messages and consumers of work, retry, dead, apns.unrouted and the registry's two dead queues.
        let made = factory.recordersMade
        #expect(made == 2 * (3 + 1 + QueueInspector.registryDeadQueues.count))
        #expect(factory.value("apns_worker_queue_messages", [("bundle", bundle), ("role", "work")]) == 7)

        metrics.sample(
            [QueueDepth(queue: "apns.\(bundle)", bundleID: bundle, role: "work", messages: 3, consumers: 1)], bundleIDs: [bundle],
            registryQueues: true)
        #expect(factory.recordersMade == made)
        #expect(factory.value("apns_worker_queue_messages", [("bundle", bundle), ("role", "work")]) == 3)
        #expect(factory.value("apns_worker_queue_consumers", [("bundle", bundle), ("role", "work")]) == 1)

        // An unreadable broker turns the same gauges to NaN, still without making new ones.
        metrics.sample(nil, bundleIDs: [bundle], registryQueues: true)
        #expect(factory.recordersMade == made)
        #expect(factory.value("apns_worker_queue_messages", [("bundle", bundle), ("role", "work")])?.isNaN == true)
    }
}
