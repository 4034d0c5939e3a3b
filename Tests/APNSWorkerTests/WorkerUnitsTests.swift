import AMQPClient
import APNSConfig
import APNSModel
import APNSTopologyNames
import Foundation
import Logging
import ServiceLifecycleTestKit
import Synchronization
import TestSupport
import QueueConsumer
import Testing

@testable import APNSWorker

/// `WorkerService.apply` (contract §3, changes while running) without sockets: the in-memory
/// broker and a transport source that records what it hands out and gets back. What RabbitMQ
/// and the simulator make of it is `ReloadEndToEndTests`.
@Suite struct WorkerUnitsTests {
    /// Hands out a scripted transport per acquire and records acquires and releases in order.
    final class RecordingSource: TransportSource {
        let state = Mutex<(events: [String], transports: [String: ScriptedTransport], answers: [String: TransportResult?])>(([], [:], [:]))

        func acquire(bundle: BundleConfiguration, environment: APNSEnvironment) throws -> any NotificationTransport {
            state.withLock { state in
                let transport = ScriptedTransport(answer: state.answers[bundle.bundleID] ?? ScriptedTransport.accepted)
                state.events.append("acquire \(bundle.bundleID) \(environment.rawValue)")
                if environment == .production { state.transports[bundle.bundleID] = transport }
                return transport
            }
        }

        func release(bundle: BundleConfiguration, environment: APNSEnvironment) {
            state.withLock { $0.events.append("release \(bundle.bundleID) \(environment.rawValue)") }
        }

        var events: [String] { state.withLock { $0.events } }
        func transport(_ bundleID: String) -> ScriptedTransport? { state.withLock { $0.transports[bundleID] } }
        /// What the next transport made for `bundleID` answers (nil: it never answers).
        func answer(_ bundleID: String, _ answer: TransportResult?) { state.withLock { $0.answers[bundleID] = .some(answer) } }
    }

    static var quiet: Logger {
        var logger = Logger(label: "units-test")
        logger.logLevel = .critical
        return logger
    }

    static func bundle(_ id: String, keyID: String = "KEY1234567") -> BundleConfiguration {
        BundleConfiguration(bundleID: id, auth: .token(teamID: "TEAM123456", keyID: keyID, tokenKeyFile: "/keys/\(keyID).p8"))
    }

    static func loaded(_ bundles: [BundleConfiguration]) -> LoadedConfiguration {
        LoadedConfiguration(
            configuration: WorkerConfiguration(amqp: AMQPSettings(urls: ["amqp://127.0.0.1"]), bundles: bundles), fileDigests: [:],
            loadedAt: Date())
    }

    static func enqueueJob(_ broker: InMemoryBroker, _ bundleID: String) {
        let token = String(repeating: "ab", count: 32)
        broker.enqueue(
            TopologyNames.workQueue(bundleID),
            body: Array(#"{"token":"\#(token)","payload":{"aps":{"alert":"hi"}},"id":"\#(UUID().uuidString)"}"#.utf8))
    }

    static func worker(_ broker: InMemoryBroker, _ source: RecordingSource, _ loaded: LoadedConfiguration) throws -> WorkerService<InMemoryBroker> {
        try WorkerService(broker: broker, configuration: loaded.configuration, source: source, logger: quiet) { bundle, _, transport in
            BundlePipeline(
                settings: BundlePipelineSettings(bundleID: bundle.bundleID, prefetch: 10, probeInterval: .seconds(60), shutdownDeadline: .seconds(60)),
                broker: broker, transport: transport, statistics: WorkerStatistics(), logger: quiet)
        }
    }

    @Test func bundlesAreAddedRemovedAndRebuiltWhileRunningAndTransportsReleasedOnlyAfterTheirJobsEnded() async throws {
        let broker = InMemoryBroker()
        let source = RecordingSource()
        let a = Self.bundle("com.example.a"), b = Self.bundle("com.example.b")
        let first = Self.loaded([a])
        let worker = try Self.worker(broker, source, first)
        #expect(source.events == ["acquire com.example.a production", "acquire com.example.a sandbox"])

        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await worker.run() }
                Self.enqueueJob(broker, a.bundleID)
                try await waitUntil("a's first job acked") { broker.settled.count == 1 && broker.unackedCount == 0 }

                // Added: declared, then consumed through transports of its own.
                let second = Self.loaded([a, b])
                let added = first.change(to: second)
                #expect(try await worker.apply(added, configuration: second.configuration).isEmpty)
                #expect(broker.queueNames().contains(TopologyNames.workQueue(b.bundleID)))
                #expect(worker.bundleIDs == [a.bundleID, b.bundleID])
                Self.enqueueJob(broker, b.bundleID)
                try await waitUntil("b's job acked") { broker.settled.count == 2 && source.transport(b.bundleID)?.sends == 1 }

                // Removed while a job of a's is in flight: a's consumer goes, but its transports
                // are released only once that job has ended and was settled.
                source.transport(a.bundleID)?.answer(nil)
                Self.enqueueJob(broker, a.bundleID)
                try await waitUntil("a's job waiting for APNs") { source.transport(a.bundleID)?.waiting == 1 }
                let third = Self.loaded([b])
                let removing = Task { try await worker.apply(second.change(to: third), configuration: third.configuration) }
                try await waitUntil("a's consumer cancelled") { broker.consumerCount == 1 }
                #expect(!source.events.contains("release com.example.a production"), "released while its job is in flight")
                source.transport(a.bundleID)?.answer(ScriptedTransport.accepted)
                #expect(try await removing.value.isEmpty)
                #expect(broker.settled.count == 3 && broker.unackedCount == 0)
                #expect(source.events.suffix(2) == ["release com.example.a production", "release com.example.a sandbox"])
                #expect(worker.bundleIDs == [b.bundleID])
                // Its queue is kept; a job for it waits there.
                Self.enqueueJob(broker, a.bundleID)
                #expect(broker.ready(TopologyNames.workQueue(a.bundleID))?.count == 1)

                // b's key changes: its unit ends, then a new one starts on new transports.
                let oldPipeline = try #require(worker.pipeline(b.bundleID))
                let rotated = Self.loaded([Self.bundle(b.bundleID, keyID: "KEY7654321")])
                let rotation = third.change(to: rotated)
                #expect(rotation.reconnected.map(\.bundleID) == [b.bundleID])
                #expect(try await worker.apply(rotation, configuration: rotated.configuration).isEmpty)
                #expect(source.events.suffix(4) == [
                    "release com.example.b production", "release com.example.b sandbox",
                    "acquire com.example.b production", "acquire com.example.b sandbox",
                ])
                #expect(worker.pipeline(b.bundleID) !== oldPipeline)
                Self.enqueueJob(broker, b.bundleID)
                try await waitUntil("b's job through its new transport") { source.transport(b.bundleID)?.sends == 1 }

                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
        // Shut down: every transport handed out was given back.
        let events = source.events
        #expect(events.filter { $0.hasPrefix("acquire") }.count == events.filter { $0.hasPrefix("release") }.count)
    }

    /// `[amqp] maxInFlight` is shared by the bundles configured now. Bundles added
    /// while running shrink the share of those already running (their consumers follow at
    /// once), and bundles removed give it back, so the total never exceeds the budget.
    @Test func runningBundlesTakeTheirNewShareWhenBundlesAreAddedOrRemoved() async throws {
        let broker = InMemoryBroker()
        let source = RecordingSource()
        let bundles = (0..<4).map { Self.bundle("com.example.share\($0)") }
        func loaded(_ count: Int) -> LoadedConfiguration {
            LoadedConfiguration(
                configuration: WorkerConfiguration(
                    amqp: AMQPSettings(urls: ["amqp://127.0.0.1"], prefetch: 500, maxInFlight: 400), bundles: Array(bundles.prefix(count))),
                fileDigests: [:], loadedAt: Date())
        }
        let bounds: WorkerService<InMemoryBroker>.BoundsMaker = { _, configuration in
            let share = configuration.amqp.inFlightBudget.share(bundles: configuration.bundles.count)
            return BundleInFlightBounds(floor: share.perBundle, ceiling: share.ceiling)
        }
        let one = loaded(1)
        let worker = try WorkerService(broker: broker, configuration: one.configuration, source: source, logger: Self.quiet, inFlightBounds: bounds) {
            bundle, configuration, transport in
            let bounds = bounds(bundle, configuration)
            var settings = BundlePipelineSettings(
                bundleID: bundle.bundleID, prefetch: UInt16(bounds.floor), probeInterval: .seconds(60), shutdownDeadline: .seconds(60))
            settings.inFlightCeiling = bounds.ceiling
            return BundlePipeline(settings: settings, broker: broker, transport: transport, statistics: WorkerStatistics(), logger: Self.quiet)
        }
        let first = try #require(worker.pipeline(bundles[0].bundleID))
        #expect(first.currentInFlightBounds == BundleInFlightBounds(floor: 400, ceiling: 400))
        #expect(first.consumer.limit == 400)

        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await worker.run() }
                try await waitUntil("the first bundle consumes") { broker.consumerCount == 1 }
                let four = loaded(4)
                #expect(try await worker.apply(one.change(to: four), configuration: four.configuration).isEmpty)
                #expect(first.currentInFlightBounds == BundleInFlightBounds(floor: 100, ceiling: 100))
                #expect(first.consumer.limit == 100, "the running consumer follows its smaller share at once")
                let total = bundles.compactMap { worker.pipeline($0.bundleID)?.consumer.limit }.reduce(0, +)
                #expect(total == 400, "four consumers within the budget of 400")

                #expect(try await worker.apply(four.change(to: one), configuration: one.configuration).isEmpty)
                #expect(first.currentInFlightBounds == BundleInFlightBounds(floor: 400, ceiling: 400), "the share comes back")
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
    }

    @Test func aUnitWhoseTransportsCannotBeMadeIsReportedAndReleasesWhatItGot() async throws {
        final class FailingSandbox: TransportSource {
            let released = Mutex<[String]>([])
            func acquire(bundle: BundleConfiguration, environment: APNSEnvironment) throws -> any NotificationTransport {
                if environment == .sandbox, bundle.bundleID == "com.example.bad" { throw TestSupportError("no TLS material") }
                return ScriptedTransport(answer: ScriptedTransport.accepted)
            }
            func release(bundle: BundleConfiguration, environment: APNSEnvironment) {
                released.withLock { $0.append("\(bundle.bundleID) \(environment.rawValue)") }
            }
        }
        let broker = InMemoryBroker()
        let source = FailingSandbox()
        let first = Self.loaded([Self.bundle("com.example.a")])
        let worker = try WorkerService(broker: broker, configuration: first.configuration, source: source, logger: Self.quiet) { bundle, _, transport in
            BundlePipeline(settings: BundlePipelineSettings(bundleID: bundle.bundleID), broker: broker, transport: transport, statistics: WorkerStatistics(), logger: Self.quiet)
        }
        let second = Self.loaded([Self.bundle("com.example.a"), Self.bundle("com.example.bad")])
        let failures = try await worker.apply(first.change(to: second), configuration: second.configuration)
        #expect(Array(failures.keys) == ["com.example.bad"])
        #expect(source.released.withLock { $0 } == ["com.example.bad production"])
        #expect(worker.bundleIDs == ["com.example.a"])
    }
}

extension BundlePipeline {
    /// The bounds now (`updateInFlightBounds(_:)`).
    var currentInFlightBounds: BundleInFlightBounds { inFlightBounds.withLock { $0 } }
}
