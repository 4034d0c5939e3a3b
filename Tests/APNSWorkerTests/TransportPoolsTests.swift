import APNSConfig
import APNSModel
import APNSWorker
import Logging
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import Testing
import TestSupport

/// The pools' bookkeeping without sockets: which bundles share a pool, when a pool runs and
/// when it drains. (Against the simulator and the broker: `SharedPoolEndToEndTests`.)
@Suite struct TransportPoolsTests {
    /// A pool's transport that answers 200 and records its life.
    final class RecordingTransport: NotificationTransport, Service, Sendable {
        let key: TransportPoolKey
        private let life = Mutex((started: false, stopped: false))

        init(key: TransportPoolKey) { self.key = key }

        var started: Bool { life.withLock { $0.started } }
        var stopped: Bool { life.withLock { $0.stopped } }

        func send(_ notification: PushNotification, completion: @escaping @Sendable (TransportResult) -> Void) {
            completion(.http(HTTPAnswer(status: 200)))
        }

        func run() async throws {
            life.withLock { $0.started = true }
            try? await gracefulShutdown()
            life.withLock { $0.stopped = true }
        }
    }

    /// The pools with in-memory key files, and every transport its factory made, in order.
    final class Fixture: Sendable {
        final class Made: Sendable {
            let list = Mutex<[RecordingTransport]>([])
        }
        let made = Made()
        let pools: TransportPools

        init() {
            let made = self.made
            var logger = Logger(label: "test.pools")
            logger.logLevel = .warning
            pools = TransportPools(
                logger: logger,
                poolKey: { bundle, environment in
                    TransportPoolKey(bundle: bundle, environment: environment) { path in Array(path.utf8) }
                },
                factory: { key, _, _ in
                    let transport = RecordingTransport(key: key)
                    made.list.withLock { $0.append(transport) }
                    return transport
                })
        }

        var transports: [RecordingTransport] { made.list.withLock { $0 } }
    }

    static func bundle(_ id: String, team: String = "TEAM1") -> BundleConfiguration {
        BundleConfiguration(bundleID: id, auth: .token(teamID: team, keyID: "KEY1", tokenKeyFile: "AuthKey.p8"))
    }

    @Test func bundlesOfOneCredentialShareOnePoolPerEnvironment() throws {
        let fixture = Fixture()
        let pools = fixture.pools
        let a = try pools.acquire(bundle: Self.bundle("com.a"), environment: .production)
        let b = try pools.acquire(bundle: Self.bundle("com.b"), environment: .production)
        let other = try pools.acquire(bundle: Self.bundle("com.c", team: "TEAM2"), environment: .production)
        let sandbox = try pools.acquire(bundle: Self.bundle("com.a"), environment: .sandbox)
        #expect((a as? RecordingTransport) === (b as? RecordingTransport))
        #expect((a as? RecordingTransport) !== (other as? RecordingTransport))
        #expect((a as? RecordingTransport) !== (sandbox as? RecordingTransport))
        #expect(fixture.transports.count == 3)
        let reports = pools.reports()
        #expect(reports.count == 3)
        let shared = try #require(reports.first { $0.bundles.count == 2 })
        #expect(shared.bundles == ["com.a", "com.b"])
        #expect(shared.environment == "production")
        #expect(shared.name.hasPrefix("token TEAM1/KEY1#"))
    }

    @Test func aPoolRunsWhenAcquiredWhileRunningAndDrainsOnlyWhenItsLastBundleReleases() async throws {
        let fixture = Fixture()
        let pools = fixture.pools
        // Acquired before run(): started once the pools run.
        _ = try pools.acquire(bundle: Self.bundle("com.a"), environment: .production)
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pools.run() }
                try await waitUntil("the first pool running") { fixture.transports.first?.started == true }
                // Acquired while running: a new pool, started at once.
                _ = try pools.acquire(bundle: Self.bundle("com.b", team: "TEAM2"), environment: .production)
                _ = try pools.acquire(bundle: Self.bundle("com.c", team: "TEAM2"), environment: .production)
                try await waitUntil("the second pool running") { fixture.transports.count == 2 && fixture.transports[1].started }
                let second = fixture.transports[1]

                pools.release(bundle: Self.bundle("com.b", team: "TEAM2"), environment: .production)
                #expect(pools.reports().count == 2, "com.c still uses it")
                #expect(!second.stopped)
                pools.release(bundle: Self.bundle("com.c", team: "TEAM2"), environment: .production)
                #expect(pools.reports().count == 1)
                try await waitUntil("the unused pool drained") { second.stopped }
                #expect(!fixture.transports[0].stopped, "the other pool goes on")
                // Released twice, or never acquired: nothing happens.
                pools.release(bundle: Self.bundle("com.c", team: "TEAM2"), environment: .production)
                pools.release(bundle: Self.bundle("com.z"), environment: .sandbox)
                #expect(pools.reports().count == 1)

                // The same credential again after its pool closed: a new pool.
                _ = try pools.acquire(bundle: Self.bundle("com.b", team: "TEAM2"), environment: .production)
                try await waitUntil("a new pool running") { fixture.transports.count == 3 && fixture.transports[2].started }

                trigger.triggerGracefulShutdown()
                try await group.next()
                let everyPoolStopped = fixture.transports.allSatisfy { $0.stopped }
                #expect(everyPoolStopped)
                #expect(throws: TransportPools.PoolsError.self) {
                    try pools.acquire(bundle: Self.bundle("com.d", team: "TEAM3"), environment: .production)
                }
            }
        }
    }

    /// A bundle re-credentialed while running: the new use begins before the old one ends, and
    /// release ends the use of the key computed when it began.
    @Test func releaseEndsTheOldestUseOfABundle() throws {
        let fixture = Fixture()
        let pools = fixture.pools
        let rotated = BundleConfiguration(bundleID: "com.a", auth: .token(teamID: "TEAM1", keyID: "KEY2", tokenKeyFile: "AuthKey2.p8"))
        _ = try pools.acquire(bundle: Self.bundle("com.a"), environment: .production)
        _ = try pools.acquire(bundle: rotated, environment: .production)
        #expect(pools.reports().count == 2)
        pools.release(bundle: Self.bundle("com.a"), environment: .production)
        #expect(pools.reports().map(\.name) == [fixture.transports[1].key.description])
    }
}
