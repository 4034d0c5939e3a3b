import APNSConfig
import Foundation
import PostgresNIO
import Testing
import TestSupport

@testable import APNSRegistry

/// PostgreSQL over TLS with `sslmode=verify-full` and `sslrootcert`, against the test
/// cluster's TLS (scripts/postgres.sh with APNS_POSTGRES_TLS=1: a CA of its own, a server
/// certificate for `localhost`). The modes that verify refuse a server whose certificate the
/// CA did not sign or whose name is not the URL's host.
@Suite(.enabled(if: TestPostgres.isAvailable && TestPostgres.environment["APNS_TEST_POSTGRES_TLS_CA"] != nil, "needs the TLS test cluster (scripts/test)"))
struct RegistryTLSTests {
    static var caFile: String { TestPostgres.environment["APNS_TEST_POSTGRES_TLS_CA"] ?? "" }

    /// The fresh database's URL with another host and query.
    static func settings(host: String, query: String) async throws -> RegistrySettings {
        let plain = try await TestPostgres.freshDatabase()
        let url = "postgres://apns:apns@\(host):\(plain.url.port)/\(plain.url.database)?\(query)"
        return RegistrySettings(url: try PostgresURL(parsing: url))
    }

    @Test func verifyFullWithSSLRootCertConnectsOverTLS() async throws {
        let settings = try await Self.settings(host: "localhost", query: "sslmode=verify-full&sslrootcert=\(Self.caFile)")
        try await RegistryStore.connectOnce(settings, logger: TestPostgres.logger)
        let ssl = try await TestPostgres.storeValue(settings) { store in
            _ = try await store.migrate()
            let rows = try await store.client.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", logger: TestPostgres.logger)
            var values: [Bool] = []
            for try await ssl in rows.decode(Bool.self) { values.append(ssl) }
            return values
        }
        #expect(ssl == [true], "the session is encrypted")
    }

    @Test func theVerifyingModesRefuseAnUntrustedOrMisnamedServer() async throws {
        // The certificate names localhost, not 127.0.0.1: verify-full checks the name.
        let misnamed = try await Self.settings(host: "127.0.0.1", query: "sslmode=verify-full&sslrootcert=\(Self.caFile)")
        await #expect(throws: (any Error).self) { try await RegistryStore.connectOnce(misnamed, logger: TestPostgres.logger) }
        // verify-ca checks the chain only: the same address passes.
        let chainOnly = try await Self.settings(host: "127.0.0.1", query: "sslmode=verify-ca&sslrootcert=\(Self.caFile)")
        try await RegistryStore.connectOnce(chainOnly, logger: TestPostgres.logger)
        // A CA that did not sign the server's certificate (the system roots, or another file).
        let systemRoots = try await Self.settings(host: "localhost", query: "sslmode=verify-full")
        await #expect(throws: (any Error).self) { try await RegistryStore.connectOnce(systemRoots, logger: TestPostgres.logger) }
        if let otherCA = TestBroker.tls?.caFile {
            let other = try await Self.settings(host: "localhost", query: "sslmode=verify-full&sslrootcert=\(otherCA)")
            await #expect(throws: (any Error).self) { try await RegistryStore.connectOnce(other, logger: TestPostgres.logger) }
            // With a root certificate even require verifies the chain, as libpq does.
            let require = try await Self.settings(host: "localhost", query: "sslmode=require&sslrootcert=\(otherCA)")
            await #expect(throws: (any Error).self) { try await RegistryStore.connectOnce(require, logger: TestPostgres.logger) }
        }
        // require without a root certificate encrypts without verifying (and start-up warns).
        let unverified = try await Self.settings(host: "localhost", query: "sslmode=require")
        try await RegistryStore.connectOnce(unverified, logger: TestPostgres.logger)
    }
}
