/// `FeedbackPollers` without sockets: pollers whose fetch the test scripts, on a manual clock,
/// publishing to the in-memory broker. Each poller is a child of `run()`, stopped alone by a
/// reload after its poll under way, and all end with the service. The real client, broker and
/// `apns-worker` process following a reload are `ReloadFollowersEndToEndTests`.
import AMQPClient
import APNSBinaryProtocol
import APNSConfig
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import ServiceClock
import ServiceLifecycleTestKit
import Synchronization
import Testing
import TestSupport

@testable import APNSWorker

@Suite struct FeedbackPollersTests {
    static let interval = Duration.seconds(60)

    static var quiet: Logger {
        var logger = Logger(label: "feedback-pollers-test")
        logger.logLevel = .critical
        return logger
    }

    /// A bundle's feedback service: counts polls, and holds the poll numbered in `gates` until
    /// the test stops that gate (a cancelled poll throws).
    final class FeedbackService: Sendable {
        private let state = Mutex((polls: 0, gates: [Int: StopSignal](), served: [Int: [FeedbackTuple]]()))

        var polls: Int { state.withLock { $0.polls } }

        /// Poll `number` waits for the returned gate, then serves `tuples`.
        func hold(poll number: Int, serving tuples: [FeedbackTuple]) -> StopSignal {
            let gate = StopSignal()
            state.withLock {
                $0.gates[number] = gate
                $0.served[number] = tuples
            }
            return gate
        }

        func fetch() async throws -> [FeedbackTuple] {
            let (gate, tuples) = state.withLock { state in
                state.polls += 1
                return (state.gates[state.polls], state.served[state.polls] ?? [])
            }
            if let gate { await gate.stopped() }
            try Task.checkCancellation()
            return tuples
        }
    }

    final class World: Sendable {
        let broker = InMemoryBroker()
        let clock = ManualClock()
        let services = Mutex([String: FeedbackService]())

        func service(_ bundleID: String) -> FeedbackService {
            services.withLock { services in
                if let service = services[bundleID] { return service }
                let service = FeedbackService()
                services[bundleID] = service
                return service
            }
        }

        func pollers(_ loaded: LoadedConfiguration) throws -> FeedbackPollers<InMemoryBroker> {
            try FeedbackPollers(loaded, logger: FeedbackPollersTests.quiet) { [self] spec in
                let feedback = service(spec.bundleID)
                var poller = FeedbackPoller(bundleID: spec.bundleID, interval: spec.interval, broker: broker, logger: FeedbackPollersTests.quiet) {
                    try await feedback.fetch()
                }
                poller.clock = clock
                return poller
            }
        }

        func published(to bundleID: String) -> Int {
            broker.published.filter { $0.exchange == TopologyNames.feedbackExchange && $0.routingKey == bundleID }.count
        }
    }

    static func loaded(_ ids: [String]) -> LoadedConfiguration {
        LoadedConfiguration(
            configuration: WorkerConfiguration(
                amqp: AMQPSettings(urls: ["amqp://127.0.0.1"]), bundles: ids.map { FeedbackPollerPlanTests.binary($0, interval: interval) }),
            fileDigests: [:], loadedAt: Date())
    }

    static func tuple(_ byte: UInt8) -> FeedbackTuple {
        FeedbackTuple(timestamp: 1_700_000_000, deviceToken: [UInt8](repeating: byte, count: 32))
    }

    @Test func aReloadStopsOnePollerAloneAfterItsPollUnderWayWhileTheOthersGoOnAndStartsNewOnes() async throws {
        let world = World()
        let (a, b, c) = ("com.example.a", "com.example.b", "com.example.c")
        // Feedback events are mandatory: a queue takes them.
        try await world.broker.declareExchange(ExchangeDeclaration(name: TopologyNames.feedbackExchange, kind: .direct))
        try await world.broker.declareQueue(QueueDeclaration(name: "feedback.test"))
        try await world.broker.declare(
            TopologyPlan(bindings: [a, b, c].map { BindingDeclaration(queue: "feedback.test", exchange: TopologyNames.feedbackExchange, routingKey: $0) }))
        let held = world.service(b).hold(poll: 1, serving: [Self.tuple(1), Self.tuple(2)])
        let pollers = try world.pollers(Self.loaded([a, b]))

        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pollers.run() }
                try await waitUntil("a polled and b's poll is under way") { world.service(a).polls == 1 && world.service(b).polls == 1 }

                // b removed while its poll is under way: the reload waits for that poll, whose
                // tuples the service served once, and they are published.
                let followed = StopSignal()  // stopped once the reload applied
                group.addTask {
                    await pollers.follow(Self.loaded([a]))
                    followed.stop()
                }
                try await waitUntil("a's next wait began") { world.clock.sleepers >= 1 }
                #expect(!followed.isStopped, "the reload waits for b's poll under way")
                held.stop()
                try await waitUntil("the reload applied") { followed.isStopped }
                #expect(world.published(to: b) == 2, "b's poll was not cut short")

                // a goes on, b polls no more.
                try await waitUntil("a and nothing else asleep on the clock") { world.clock.sleepers == 1 }
                world.clock.advance(by: Self.interval)
                try await waitUntil("a's second poll") { world.service(a).polls == 2 }
                #expect(world.service(b).polls == 1)

                // c added: its poller starts beside a's.
                await pollers.follow(Self.loaded([a, c]))
                try await waitUntil("c's first poll") { world.service(c).polls == 1 }

                // Graceful shutdown waits for a poll under way too, then ends every poller.
                let aHeld = world.service(a).hold(poll: 3, serving: [Self.tuple(3)])
                try await waitUntil("a and c asleep on the clock") { world.clock.sleepers == 2 }
                world.clock.advance(by: Self.interval)
                try await waitUntil("a's third poll under way") { world.service(a).polls == 3 }
                trigger.triggerGracefulShutdown()
                aHeld.stop()
                try await group.waitForAll()
            }
        }
        #expect(world.published(to: a) == 1, "a's last poll finished before the service ended")
        #expect(world.clock.sleepers == 0)
    }

    /// Cancellation is the service stopped at once: a poll under way is cut short, and `run()`
    /// returns without waiting for the feedback service.
    @Test(.timeLimit(.minutes(2))) func cancellingTheServiceCutsAPollUnderWayShort() async throws {
        let world = World()
        let a = "com.example.a"
        _ = world.service(a).hold(poll: 1, serving: [Self.tuple(1)])  // never let through
        let pollers = try world.pollers(Self.loaded([a]))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pollers.run() }
            try await waitUntil("a's poll under way") { world.service(a).polls == 1 }
            group.cancelAll()
            try await group.waitForAll()
        }
        #expect(world.published(to: a) == 0)
    }

    /// A reload that comes before `run()` began waits for it (the poller it stops ends before
    /// any poll, or after its first); one after it ended neither hangs nor starts a poller.
    @Test(.timeLimit(.minutes(2))) func reloadsBeforeTheServiceRunsAndAfterItEndedDoNotHang() async throws {
        let world = World()
        let (a, b) = ("com.example.a", "com.example.b")
        let pollers = try world.pollers(Self.loaded([a]))
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await pollers.follow(Self.loaded([b])) }
                group.addTask { try await pollers.run() }
                try await waitUntil("b's first poll") { world.service(b).polls == 1 }
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
        #expect(world.service(a).polls <= 1)
        await pollers.follow(Self.loaded([a]))
        #expect(world.service(a).polls <= 1, "no poller starts after the service ended")
        #expect(world.clock.sleepers == 0)
    }
}
