/// The registry's admin routes against the real PostgreSQL `scripts/test` starts: a
/// value the request carries that the registry cannot hold (NUL, a control character, a name
/// that is no bundle ID or token) is the request's fault, a 400 with the reason, never the 503
/// that says the registry is down.
import APNSAdmin
import APNSConfig
import APNSModel
import APNSRegistry
import APNSRegistryMessages
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing
import TestSupport

@Suite struct AdminRegistryRouteTests {
    static let environment = ProcessInfo.processInfo.environment
    static var postgresAvailable: Bool { environment["APNS_TEST_POSTGRES_URL"] != nil }

    static var postgresPort: Int { Int(environment["APNS_TEST_POSTGRES_PORT"] ?? "") ?? 5442 }

    /// Runs SQL as the cluster's superuser in `database`.
    static func psql(_ sql: String, database: String = "postgres") async throws {
        let bin = environment["APNS_TEST_POSTGRES_BIN"] ?? "/usr/lib/postgresql/15/bin"
        let result = try await runProcess(
            bin + "/psql", ["-h", "127.0.0.1", "-p", "\(postgresPort)", "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1", "-qc", sql])
        guard result.status == 0 else { throw TestSupportError("psql failed: \(result.stderr)") }
    }

    /// A new empty database on the cluster `scripts/test` started (not migrated).
    static func freshStore(named name: String = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()) async throws
        -> RegistryStore
    {
        let port = postgresPort
        try await psql("CREATE DATABASE \(name) OWNER apns")
        let settings = RegistrySettings(url: try PostgresURL(parsing: "postgres://apns:apns@127.0.0.1:\(port)/\(name)?sslmode=disable"))
        return try RegistryStore(settings: settings, logger: AdminHarness.logger)
    }

    static func admin(_ store: RegistryStore) throws -> AdminService {
        try AdminService(
            settings: AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: nil), worker: FixedStatus(), queues: nil,
            prometheus: nil, logger: AdminHarness.logger, registry: store)
    }

    static func error(_ response: TestResponse) -> String {
        let json = try? JSONSerialization.jsonObject(with: Data(String(buffer: response.body).utf8)) as? [String: String]
        return json?["error"] ?? ""
    }

    @Test(.enabled(if: postgresAvailable))
    func valuesTheRegistryCannotHoldAreTheRequestsFaultNotAnOutage() async throws {
        let store = try await Self.freshStore()
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await store.run() }
            defer { tasks.cancelAll() }
            _ = try await store.migrate()
            let bundle = "com.example.registry-admin"
            let token = String(repeating: "ab", count: 32)
            try await store.apply(RegistrationMessage(op: .register, bundleID: bundle, token: token, group: "ops", at: 42))
            try await Self.admin(store).makeApplication().test(.router) { client in
                // The registry answers ordinary questions.
                #expect(try await client.execute(uri: "/api/registry/groups/ops", method: .get).status == .ok)
                #expect(try await client.execute(uri: "/api/registry/devices/\(bundle)/\(token)", method: .get).status == .ok)
                #expect(try await client.execute(uri: "/api/registry/groups/nobody", method: .get).status == .ok)

                // NUL is what PostgreSQL refuses in text; the other values break contract §6's rules.
                for (uri, mentions) in [
                    ("/api/registry/groups/%00", "group must not contain control characters"),
                    ("/api/registry/groups/a%0Ab", "group must not contain control characters"),
                    ("/api/registry/groups/\(String(repeating: "g", count: 201))", "group must be 1 to 200 bytes"),
                    ("/api/registry/devices/\(bundle)/%00", "token must be"),
                    ("/api/registry/devices/\(bundle)/zz", "token must be"),
                    ("/api/registry/devices/com%00x/\(token)", "bundleId must be"),
                ] {
                    let response = try await client.execute(uri: uri, method: .get)
                    #expect(response.status == .badRequest, "\(uri)")
                    #expect(Self.error(response).contains(mentions), "\(uri): \(Self.error(response))")
                }
                let page = try await client.execute(uri: "/registry?group=%00", method: .get)
                #expect(page.status == .badRequest)
                let html = String(buffer: page.body)
                #expect(html.contains("group must not contain control characters") && !html.contains("unavailable"))
                #expect(try await client.execute(uri: "/registry?group=ops", method: .get).status == .ok)
            }
        }
    }

    /// The decision behind the 400s for any value PostgreSQL itself refuses, asked of the real
    /// server: a NUL in text (SQLSTATE 22021) is the request's; a lost connection is not.
    @Test(.enabled(if: postgresAvailable))
    func aValuePostgreSQLRefusesIsTheRequestsFault() async throws {
        let store = try await Self.freshStore()
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await store.run() }
            defer { tasks.cancelAll() }
            _ = try await store.migrate()
            do {
                _ = try await store.devices(group: "\u{0}")
                Issue.record("PostgreSQL accepted a NUL in text")
            } catch {
                let refused = try #require(RegistryStore.refusedValue(error))
                #expect(refused.contains("SQLSTATE 22021") && refused.contains("of this request"), "\(refused)")
            }
            #expect(RegistryStore.refusedValue(CancellationError()) == nil)
        }
    }

    /// One device in each of 2,000 bundle IDs (anyone allowed to publish on
    /// `apns.registry` can make them) and a count under each. The summary and the page show the
    /// busiest bundle IDs and say what the rest hold, instead of drawing every one.
    @Test(.enabled(if: postgresAvailable))
    func theSummaryAndThePageShowTheBusiestBundlesAndCountTheRest() async throws {
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        let store = try await Self.freshStore(named: name)
        let forged = 2_000
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await store.run() }
            defer { tasks.cancelAll() }
            _ = try await store.migrate()
            try await Self.psql(
                """
                INSERT INTO apns_devices (bundle_id, token, group_name, environment, registered, changed_at, registered_at)
                SELECT 'com.forged.' || n, 'ab', 'g', 'production', true, 1, 1 FROM generate_series(1, \(forged)) AS n
                """, database: name)
            let real = "com.example.real"
            for token in ["01", "02", "03"] {
                try await store.apply(RegistrationMessage(op: .register, bundleID: real, token: token, group: "ops", at: 42))
            }
            var aggregator = CountAggregator()
            let now = Int64(Date().timeIntervalSince1970)
            for n in 1...forged { aggregator.add(bundleID: "com.forged.\(n)", end: .fannedOut, epochSeconds: now) }
            aggregator.add(bundleID: real, end: .delivered, epochSeconds: now, count: 9)
            try await store.addCounts(aggregator.take())

            try await Self.admin(store).makeApplication().test(.router) { client in
                let response = try await client.execute(uri: "/api/registry/summary", method: .get)
                #expect(response.status == .ok)
                let summary = try JSONDecoder().decode(RegistrySummaryBody.self, from: Data(String(buffer: response.body).utf8))
                #expect(summary.devices.count == RegistryStore.deviceCountBundleLimit)
                #expect(summary.devices.first?.bundleId == real)
                #expect(summary.devicesNotShown.bundles == Int64(forged + 1 - RegistryStore.deviceCountBundleLimit))
                #expect(summary.devicesNotShown.active == Int64(forged + 1 - RegistryStore.deviceCountBundleLimit))
                let charted = Set(summary.counts.map(\.bundleId))
                #expect(charted.count == RegistryStore.countedBundleLimit && charted.contains(real))
                #expect(summary.countsNotShown.bundles == Int64(forged + 1 - RegistryStore.countedBundleLimit))
                #expect(summary.countsNotShown.count == Int64(forged + 1 - RegistryStore.countedBundleLimit))

                let page = try await client.execute(uri: "/registry", method: .get)
                #expect(page.status == .ok)
                let html = String(buffer: page.body)
                #expect(html.components(separatedBy: "<svg").count - 1 == RegistryStore.countedBundleLimit)
                #expect(html.components(separatedBy: "<td>com.forged.").count - 1 < forged)
                #expect(html.contains("<p id=\"device-counts-not-shown\">The \(RegistryStore.deviceCountBundleLimit) bundle IDs with the most devices are shown; \(forged + 1 - RegistryStore.deviceCountBundleLimit) more hold"))
                #expect(html.contains("<p id=\"counts-not-shown\">The \(RegistryStore.countedBundleLimit) bundle IDs with the most notifications are drawn"))
            }
        }
    }

    /// `/api/registry/summary` as a client reads it.
    struct RegistrySummaryBody: Decodable {
        struct NotShown: Decodable {
            var bundles: Int64
            var active: Int64?
            var count: Int64?
        }
        var devices: [BundleDeviceCount]
        var counts: [CountRow]
        var devicesNotShown: NotShown
        var countsNotShown: NotShown
    }

}
