import APNSConfig
import APNSRegistry
import Foundation
import Logging
import TestSupport

/// The PostgreSQL cluster `scripts/test` starts (`APNS_TEST_POSTGRES_*`), a fresh database per
/// test on it, and private clusters for tests that stop and start PostgreSQL.
enum TestPostgres {
    static let environment = ProcessInfo.processInfo.environment
    static var isAvailable: Bool { environment["APNS_TEST_POSTGRES_URL"] != nil && TestBroker.isAvailable }
    static var bin: String { environment["APNS_TEST_POSTGRES_BIN"] ?? "/usr/lib/postgresql/15/bin" }

    /// A new empty database owned by `apns` on the shared cluster; its registry settings.
    static func freshDatabase(port: Int? = nil) async throws -> RegistrySettings {
        let port = port ?? Int(environment["APNS_TEST_POSTGRES_PORT"] ?? "") ?? 5442
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        let result = try await runProcess(
            bin + "/psql", ["-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", "CREATE DATABASE \(name) OWNER apns"])
        guard result.status == 0 else { throw TestSupportError("CREATE DATABASE failed: \(result.stderr)") }
        var settings = RegistrySettings(url: try PostgresURL(parsing: "postgres://apns:apns@127.0.0.1:\(port)/\(name)?sslmode=disable"))
        settings.countsFlushInterval = .milliseconds(200)
        return settings
    }

    static var logger: Logger {
        var logger = Logger(label: "registry-test")
        logger.logLevel = .warning
        return logger
    }

    /// Runs `body` with a store on `settings` whose pool runs meanwhile.
    static func withStore(
        _ settings: RegistrySettings, operationTimeout: Duration = .seconds(120), _ body: @escaping @Sendable (RegistryStore) async throws -> Void
    ) async throws {
        try await storeValue(settings, operationTimeout: operationTimeout, body)
    }

    /// `withStore` for a body that returns a value.
    static func storeValue<T: Sendable>(
        _ settings: RegistrySettings, operationTimeout: Duration = .seconds(120), _ body: @escaping @Sendable (RegistryStore) async throws -> T
    ) async throws -> T {
        // Tests of a working database are not about the store's 10 s limit: at the start of a
        // full run every suite starts at once, and a fresh database's first query was seen to
        // wait past it (load 33). A test of a database that is down gives a short one, which
        // each of its operations then waits out.
        let store = try RegistryStore(settings: settings, logger: logger, operationTimeout: operationTimeout)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await store.run()
                return nil
            }
            defer { group.cancelAll() }
            return try await body(store)
        }
    }
}

/// A PostgreSQL cluster of a test's own (scripts/postgres.sh on a free port), for tests that stop
/// and start it; always stop it.
final class PrivatePostgres: Sendable {
    let directory: String
    let port: Int

    init() throws {
        directory = NSTemporaryDirectory() + "apnsw-pg-\(UUID().uuidString.prefix(8))"
        port = try serverPort()
    }

    func start() async throws {
        let result = try await runProcess(
            "/bin/bash", [repositoryRoot + "/scripts/postgres.sh", "start", directory],
            environment: ProcessInfo.processInfo.environment.merging(["APNS_POSTGRES_PORT": "\(port)"]) { $1 })
        guard result.status == 0 else { throw TestSupportError("postgres.sh start failed: \(result.stderr)") }
    }

    func stop() async {
        _ = try? await runProcess(
            "/bin/bash", [repositoryRoot + "/scripts/postgres.sh", "stop", directory],
            environment: ProcessInfo.processInfo.environment.merging(["APNS_POSTGRES_PORT": "\(port)"]) { $1 })
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }
}
