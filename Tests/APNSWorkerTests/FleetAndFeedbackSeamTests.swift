// The fleet service, fleet control and the feedback poller against the in-memory broker
// (TestSupport's `InMemoryBroker`): their logic without a socket. What RabbitMQ does with the
// same messages is tested end to end (`FleetEndToEndTests`, `FeedbackPollerTests`).
import AMQPClient
import APNSBinaryProtocol
import APNSFleet
import APNSModel
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import Synchronization
import Testing
import TestSupport

@testable import APNSWorker

/// This instance's bundles, as the fleet service sees them, without pipelines.
final class StubFleetMember: FleetMember {
    let bundleIDs: [String]
    let statistics = WorkerStatistics()
    private let paused = Mutex<Set<String>>([])
    private let changes = Mutex<[(String, Bool)]>([])

    init(bundleIDs: [String]) { self.bundleIDs = bundleIDs }

    var pausedBundles: Set<String> { paused.withLock { $0 } }
    var pauseChanges: Int { changes.withLock { $0.count } }

    func setPaused(_ bundleID: String, _ value: Bool) -> Bool {
        guard bundleIDs.contains(bundleID) else { return false }
        let changed = paused.withLock { value ? $0.insert(bundleID).inserted : $0.remove(bundleID) != nil }
        if changed { changes.withLock { $0.append((bundleID, value)) } }
        return changed
    }

    func lastTakenPublishedAt(_ bundleID: String) -> Date? { Date(timeIntervalSince1970: 1_700_000_000) }

    func status() -> WorkerStatus {
        WorkerStatus(
            broker: AMQPConnectionState.connected.rawValue,
            bundles: bundleIDs.map { bundle in
                WorkerStatus.Bundle(
                    bundleID: bundle, held: false, paused: pausedBundles.contains(bundle),
                    activity: statistics.activity(bundle: bundle), connections: [:])
            })
    }
}

private var quietLogger: Logger {
    var logger = Logger(label: "seam-tests")
    logger.logLevel = .critical
    return logger
}

@Suite("the fleet service and fleet control without a broker")
struct FleetServiceSeamTests {
    static func fleet(
        _ broker: InMemoryBroker, _ member: StubFleetMember, id: String = "host-1-abc", interval: Duration = .milliseconds(100)
    ) -> FleetService<InMemoryBroker> {
        FleetService(
            broker: broker, worker: member,
            identity: FleetIdentity(instanceID: id, host: "host", pid: 1, version: "test", startedAt: Date(timeIntervalSince1970: 1_700_000_000)),
            interval: interval, logger: quietLogger)
    }

    @Test func aHeartbeatCarriesThisInstanceAndItsBundlesToTheFleetExchangeWithATTLOfThreeIntervals() async throws {
        let broker = InMemoryBroker()
        try await broker.declareExchange(FleetTopology.exchange)
        try await broker.declare(FleetTopology.plan(instanceID: "listener", messageTTL: .seconds(1)))
        let member = StubFleetMember(bundleIDs: ["com.example.a", "com.example.b"])
        _ = member.setPaused("com.example.b", true)
        try await Self.fleet(broker, member).publishHeartbeat()

        let message = try #require(broker.published.first)
        ContractCapture.record(kind: ContractCapture.fleetMessage, json: message.body)
        #expect(message.exchange == TopologyNames.fleetExchange)
        #expect(message.properties.expiration == "300")
        guard case .heartbeat(let instance) = FleetMessage.decode(message.body) else {
            Issue.record("not a heartbeat")
            return
        }
        #expect(instance.id == "host-1-abc")
        #expect(instance.broker == "connected")
        #expect(instance.bundles.keys.sorted() == ["com.example.a", "com.example.b"])
        #expect(instance.bundles["com.example.b"]?.paused == true)
        #expect(instance.bundles["com.example.a"]?.paused == false)
        #expect(instance.bundles["com.example.a"]?.lastTakenPublishedAt == Date(timeIntervalSince1970: 1_700_000_000))
        // The fanout exchange delivered it to the listener's queue.
        #expect(broker.ready(TopologyNames.fleetQueue(instanceID: "listener"))?.count == 1)
    }

    @Test func runningItHearsItsOwnAndOtherInstancesHeartbeatsAndAcksEveryMessage() async throws {
        let broker = InMemoryBroker()
        let member = StubFleetMember(bundleIDs: ["com.example.a"])
        // A long interval: the other instance's one heartbeat (and its message TTL of three
        // intervals) must outlive the wait below on a loaded machine; at 100 ms it did not.
        let fleet = Self.fleet(broker, member, interval: .seconds(10))
        let running = Task { try await fleet.run() }
        defer { running.cancel() }
        try await waitUntil("this instance's own heartbeat heard") { fleet.report().instances.map(\.id) == ["host-1-abc"] }

        var other = try #require(Self.heartbeat(of: broker))
        other.id = "host-2-def"
        other.bundles = ["com.example.z": other.bundles["com.example.a"]!]
        try await broker.publish(FleetControl.control(.heartbeat(other)))
        try await broker.publish(
            AMQPOutboundMessage(exchange: TopologyNames.fleetExchange, routingKey: "", body: Array("not fleet".utf8), properties: AMQPProperties()))
        try await waitUntil("the other instance heard and the forged message counted") {
            fleet.report().instances.map(\.id).sorted() == ["host-1-abc", "host-2-def"] && fleet.report().dropped?.ignored == 1
        }
        #expect(fleet.snapshot().totals(now: Date()).keys.sorted() == ["com.example.a", "com.example.z"])
        try await waitUntil("every delivery settled") { broker.unackedCount == 0 }
        #expect(broker.settled.allSatisfy { $0.requeue == nil })
        running.cancel()
        try await running.value
        #expect(broker.consumerCount == 0)
    }

    /// The view is kept on the fleet's clock (a heartbeat heard at its wall time), so what it
    /// reports live is asked on the same clock: an instance silent for an hour of a manual clock
    /// is gone from the report, the page and the graph, though the system's clock barely moved.
    @Test func theReportIsAskedOnTheFleetsOwnClock() async throws {
        let broker = InMemoryBroker()
        let clock = ManualClock()
        let fleet = FleetService(
            broker: broker, worker: StubFleetMember(bundleIDs: ["com.example.a"]),
            identity: FleetIdentity(instanceID: "host-1-abc", host: "host", pid: 1, version: "test", startedAt: Date(timeIntervalSince1970: 1_700_000_000)),
            interval: .seconds(10), logger: quietLogger, clock: clock)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await fleet.run() }
            try await waitUntil("this instance's own heartbeat heard") { fleet.report().instances.map(\.id) == ["host-1-abc"] }
            group.cancelAll()
            try await group.waitForAll()
        }
        clock.advance(by: .seconds(3600))
        #expect(fleet.wallTime == clock.wallTime)
        #expect(fleet.report().instances.isEmpty, "silent for an hour on the fleet's clock")
    }

    @Test func aPauseMarkerPausesTheBundleAtOnceAndItsRemovalResumesIt() async throws {
        let broker = InMemoryBroker()
        let member = StubFleetMember(bundleIDs: ["com.example.a"])
        let fleet = Self.fleet(broker, member)
        let running = Task { try await fleet.run() }
        defer { running.cancel() }
        try await waitUntil("the fleet consumer running") { broker.consumerCount == 1 }

        // Another instance (or the CLI) pauses: marker first, then the control message.
        try await FleetControl.pause("com.example.a", on: broker)
        #expect(try await FleetControl.isPaused("com.example.a", on: broker))
        try await waitUntil("the bundle paused") { member.pausedBundles == ["com.example.a"] }
        #expect(fleet.report().paused == ["com.example.a"])

        try await FleetControl.resume("com.example.a", on: broker)
        #expect(try await !FleetControl.isPaused("com.example.a", on: broker))
        try await waitUntil("the bundle resumed") { member.pausedBundles.isEmpty }
        // A control message for a bundle this instance does not consume changes nothing.
        try await FleetControl.pause("com.example.other", on: broker)
        try await Task.sleep(for: .milliseconds(300))
        #expect(member.pausedBundles.isEmpty)
    }

    @Test func aMarkerFoundWithoutItsControlMessageIsAppliedByTheNextReconcile() async throws {
        let broker = InMemoryBroker()
        let member = StubFleetMember(bundleIDs: ["com.example.a", "com.example.b"])
        // The marker exists; the control message was lost.
        try await broker.declareQueue(FleetTopology.pauseMarker("com.example.b"))
        try await Self.fleet(broker, member).applyStoredPauses()
        #expect(member.pausedBundles == ["com.example.b"])
        // Applying it again changes nothing.
        try await Self.fleet(broker, member).applyStoredPauses()
        #expect(member.pauseChanges == 1)
    }

    @Test func setPausedFromTheAdminServerWritesTheMarkerAndPausesThisInstanceAtOnce() async throws {
        let broker = InMemoryBroker()
        let member = StubFleetMember(bundleIDs: ["com.example.a"])
        let fleet = Self.fleet(broker, member)
        try await fleet.setPaused("com.example.a", true)
        #expect(member.pausedBundles == ["com.example.a"])
        #expect(broker.queueNames().contains(TopologyNames.pauseMarker("com.example.a")))
        let control = try #require(broker.published.last)
        ContractCapture.record(kind: ContractCapture.fleetMessage, json: control.body)
        guard case .pause(let bundle) = FleetMessage.decode(control.body) else {
            Issue.record("not a pause message")
            return
        }
        #expect(bundle == "com.example.a")
        try await fleet.setPaused("com.example.a", false)
        #expect(member.pausedBundles.isEmpty)
        #expect(!broker.queueNames().contains(TopologyNames.pauseMarker("com.example.a")))
    }

    @Test func theCLIListenerReportsTheInstancesHeardAndThePausedBundles() async throws {
        let broker = InMemoryBroker()
        let member = StubFleetMember(bundleIDs: ["com.example.a"])
        // An interval far longer than the test: with 100 ms the instance was silent (3 intervals)
        // again by the time a loaded machine built the report after hearing it.
        let fleet = Self.fleet(broker, member, interval: .seconds(60))
        try await FleetControl.pause("com.example.p", on: broker)
        // The listen ends once it heard the instance (a generous deadline otherwise): on a loaded
        // machine a fixed 800 ms window heard nothing.
        let report = try await withThrowingTaskGroup(of: FleetReport?.self) { group in
            group.addTask {
                try await FleetControl.listen(on: broker, for: .seconds(60), bundleIDs: ["com.example.p", "com.example.q"]) {
                    !$0.live(now: Date()).isEmpty
                }
            }
            group.addTask {
                // Heartbeats only reach listeners whose queue exists: publish until the listen ends.
                while !Task.isCancelled {
                    try await fleet.publishHeartbeat()
                    try? await Task.sleep(for: .milliseconds(100))
                }
                return nil
            }
            var report: FleetReport?
            while let result = try await group.next() {
                if let result {
                    report = result
                    group.cancelAll()
                }
            }
            return report
        }
        let heard = try #require(report)
        #expect(heard.instances.map(\.id) == ["host-1-abc"])
        #expect(heard.paused == ["com.example.p"])
    }

    /// A heartbeat of the stub instance, as published.
    static func heartbeat(of broker: InMemoryBroker) -> FleetInstance? {
        for message in broker.published.reversed() {
            if case .heartbeat(let instance) = FleetMessage.decode(message.body) { return instance }
        }
        return nil
    }
}

@Suite("the feedback poller without a broker")
struct FeedbackPollerSeamTests {
    static let bundle = "com.example.legacy"

    /// The broker with `apns.feedback` declared and a queue bound to it for the bundle.
    static func broker() async throws -> InMemoryBroker {
        let broker = InMemoryBroker()
        try await broker.declareExchange(ExchangeDeclaration(name: TopologyNames.feedbackExchange, kind: .direct))
        try await broker.declareQueue(QueueDeclaration(name: "feedback.test"))
        try await broker.declare(TopologyPlan(bindings: [BindingDeclaration(queue: "feedback.test", exchange: TopologyNames.feedbackExchange, routingKey: bundle)]))
        return broker
    }

    static func tuple(_ byte: UInt8, at time: UInt32) -> FeedbackTuple {
        FeedbackTuple(timestamp: time, deviceToken: [UInt8](repeating: byte, count: 32))
    }

    @Test func everyTupleServedBecomesOneUnregisteredEventOnTheBundlesRoutingKey() async throws {
        let broker = try await Self.broker()
        let served = [Self.tuple(1, at: 1_700_000_000), Self.tuple(2, at: 1_700_000_001)]
        let poller = FeedbackPoller(bundleID: Self.bundle, interval: .seconds(60), broker: broker, logger: quietLogger) { served }
        let left = await poller.poll(unpublished: [])
        #expect(left.isEmpty)
        let events = try broker.published.map { try #require(try JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any]) }
        #expect(broker.published.allSatisfy { $0.exchange == TopologyNames.feedbackExchange && $0.routingKey == Self.bundle })
        #expect(Set(events.compactMap { $0["token"] as? String }) == [String(repeating: "01", count: 32), String(repeating: "02", count: 32)])
        #expect(events.allSatisfy { $0["reason"] as? String == "Unregistered" && $0["jobId"] is NSNull })
        #expect(Set(events.compactMap { ($0["timestamp"] as? NSNumber)?.int64Value }) == [1_700_000_000_000, 1_700_000_001_000])
        #expect(broker.ready("feedback.test")?.count == 2)
    }

    @Test func tuplesWhosePublishFailedAreKeptAndPublishedBeforeTheNextFetch() async throws {
        let broker = try await Self.broker()
        let rounds = Mutex([[Self.tuple(1, at: 1)], [Self.tuple(2, at: 2)]])
        let poller = FeedbackPoller(bundleID: Self.bundle, interval: .seconds(60), broker: broker, logger: quietLogger) {
            rounds.withLock { $0.isEmpty ? [] : $0.removeFirst() }
        }
        broker.failPublishes = true
        let kept = await poller.poll(unpublished: [])
        #expect(kept == [Self.tuple(1, at: 1)])
        #expect(broker.published.isEmpty)

        broker.failPublishes = false
        let left = await poller.poll(unpublished: kept)
        #expect(left.isEmpty)
        #expect(broker.published.count == 2)
        #expect(broker.ready("feedback.test")?.count == 2)
    }

    @Test func aFailedFetchPublishesWhatWasKeptAndLosesNothing() async throws {
        let broker = try await Self.broker()
        let poller = FeedbackPoller(bundleID: Self.bundle, interval: .seconds(60), broker: broker, logger: quietLogger) {
            throw TestSupportError("the feedback service is down")
        }
        let left = await poller.poll(unpublished: [Self.tuple(7, at: 7)])
        #expect(left.isEmpty)
        #expect(broker.published.count == 1)
    }
}
