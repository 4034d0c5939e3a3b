// Registry rows whose bundle ID no AMQP routing key can carry (written around the registration
// rules: `importDevices`, another tool, a hand), against the real broker and PostgreSQL: the
// AMQP client refuses their publish (`invalidName`), and neither the group job nor a trailing
// push may be redone for ever because of them.
import AMQPClient
import APNSModel
import APNSRegistryMessages
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import QueueConsumer
import ServiceClock
import Testing
import TestSupport

@testable import APNSRegistry

@Suite(.enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct UnroutableDeviceTests {
    /// Longer than the 255 bytes of an AMQP short string: the fan-out's routing key.
    static let unroutableBundle = String(repeating: "u", count: 300)
    let bundle = uniqueName("com.example.unroutable")
    let token = RegistryHarness.token(1)

    static var logger: Logger {
        var logger = Logger(label: "unroutable-device-tests")
        logger.logLevel = .critical
        return logger
    }

    /// Runs `body` with a fresh registry holding one device of `bundle` and one of the
    /// unroutable bundle in group "g", a store on it, and a broker connection on which `bundle`'s
    /// work queue exists (closed afterwards).
    func withPrepared(_ body: @escaping @Sendable (RegistryStore, AMQPConnection) async throws -> Void) async throws {
        let settings = try await TestPostgres.freshDatabase()
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [try TestBroker.require().amqpURL], connectionName: "unroutable-device-tests"),
            logger: Self.logger)
        let (bundle, token) = (bundle, token)
        do {
            try await connection.declare(TopologyPlan(bundleIDs: [bundle], retryDelays: [.seconds(1)], queueType: .quorum))
            try await TestPostgres.withStore(settings) { store in
                try await store.migrate()
                try await store.importDevices(bundleID: bundle, tokens: [token], group: "g", at: 1)
                try await store.importDevices(bundleID: Self.unroutableBundle, tokens: [token], group: "g", at: 1)
                try await body(store, connection)
            }
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
    }

    static func groupJob(_ body: String) -> AMQPDelivery {
        AMQPDelivery(
            message: AMQPDeliveredMessage(
                exchange: TopologyNames.groups, routingKey: "", redelivered: false, body: Array(body.utf8), properties: .persistentJSON),
            tag: AMQPDeliveryTag(channel: 1, generation: 1, value: 1), consumerTag: nil)
    }

    /// The group job reaches the routable device and is done (acked), with or without the sync
    /// window; it was requeued after every fan-out, so it went round for ever.
    @Test(arguments: [Duration.zero, .seconds(60)])
    func aGroupJobSkipsADeviceWhoseBundleIDNoRoutingKeyCarries(window: Duration) async throws {
        let bundle = bundle
        try await withPrepared { store, connection in
            let fanOut = GroupFanOut(
                store: store, broker: connection, recorder: nil, batchSize: 500, window: SyncWindow(length: window), logger: Self.logger)
            let route = await fanOut.handle(Self.groupJob(#"{"group":"g","payload":{"aps":{"content-available":1}}}"#))
            let acked = if case .ack = route { true } else { false }
            #expect(acked, "the group job was not done with: \(route)")
            let queued = try await Self.jobsQueued(connection, bundle: bundle, atLeast: 1)
            #expect(queued == 1)
        }
    }

    /// A merged push for a device of the unroutable bundle is done with once its window ends
    /// (its trailing body cleared, the next window opened); it kept its claim and was claimed
    /// again after every lease, for ever. The routable device's trailing push goes out.
    @Test func aTrailingPushWhoseBundleIDNoRoutingKeyCarriesIsDroppedNotClaimedForEver() async throws {
        let bundle = bundle
        try await withPrepared { store, connection in
            // Long enough that the second job still falls in the windows the first opened on a
            // loaded machine (CI once took over a second between the two with a 1 s window, and
            // over five at load 31 with a 5 s one).
            let window = SyncWindow(length: .seconds(20))
            // The first job opens both windows, the second merges into them: two trailing pushes.
            _ = try await SyncWindowStoreTests.decideAndWrite(store, window: window, job: UUID())
            let merged = try await SyncWindowStoreTests.decideAndWrite(store, window: window, job: UUID())
            #expect(merged.written.count == 2, "the second job merged into both windows: \(merged.actions)")
            let pusher = TrailingPusher(
                store: store, broker: connection, recorder: nil, window: window, batchSize: 10, leaseMS: 200, logger: Self.logger,
                clock: SystemConsumerClock())
            var claimed = 0
            try await waitUntil("both windows ended and their pushes were claimed", timeout: .seconds(120)) {
                claimed += try await pusher.pushDue()
                return claimed >= 2
            }
            let devices = try await store.activeDevicesWithWindows(group: "g", after: nil, limit: 10).devices
            #expect(devices.count == 2)
            for device in devices {
                #expect(device.window.trailing == nil, "a trailing push is left for \(device.device.bundleID.prefix(40))")
            }
            let queued = try await Self.jobsQueued(connection, bundle: bundle, atLeast: 1)
            #expect(queued == 1)
        }
    }

    /// The ready messages of `bundle`'s work queue, once there are at least `atLeast`.
    static func jobsQueued(_ connection: AMQPConnection, bundle: String, atLeast: UInt32) async throws -> UInt32 {
        var count: UInt32 = 0
        try await waitUntil("the routable device's job is in its work queue") {
            count = try await connection.inspectQueue(TopologyNames.workQueue(bundle)).messageCount
            return count >= atLeast
        }
        return count
    }
}
