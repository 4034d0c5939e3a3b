/// The registry's admin routes against the real PostgreSQL `scripts/test` starts (issue 35): a
/// value the request carries that the registry cannot hold (NUL, a control character, a name
/// that is no bundle ID or token) is the request's fault, a 400 with the reason, never the 503
/// that says the registry is down.
import APNSAdmin
import APNSConfig
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

    /// A new empty database on the cluster `scripts/test` started, migrated.
    static func freshStore() async throws -> RegistryStore {
        let port = Int(environment["APNS_TEST_POSTGRES_PORT"] ?? "") ?? 5442
        let bin = environment["APNS_TEST_POSTGRES_BIN"] ?? "/usr/lib/postgresql/15/bin"
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        let created = try await runProcess(
            bin + "/psql", ["-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", "CREATE DATABASE \(name) OWNER apns"])
        guard created.status == 0 else { throw TestSupportError("CREATE DATABASE failed: \(created.stderr)") }
        let settings = RegistrySettings(url: try PostgresURL(parsing: "postgres://apns:apns@127.0.0.1:\(port)/\(name)?sslmode=disable"))
        return try RegistryStore(settings: settings, logger: AdminHarness.logger)
    }

    static func admin(_ store: RegistryStore) throws -> AdminService {
        try AdminService(
            settings: AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: nil), worker: FixedStatus(), queues: nil,
            registry: nil, logger: AdminHarness.logger, registryStore: store)
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
}
