import APNSConfig
import APNSModel
import Logging
import Synchronization
import Testing
import TestSupport

@testable import APNSRegistry

/// The recorder's count batches against the real PostgreSQL of `scripts/test`: a count whose row
/// PostgreSQL refuses is dropped alone, with one error line; an unavailable registry keeps them all.
@Suite(.enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct RegistryRecorderCountTests {
    /// 2,700 random letters: a row of `apns_counts` keyed by it is over the 2704-byte index row
    /// limit (random, so PostgreSQL cannot compress it under the limit). Reached in production by
    /// a device whose bundle ID was written by `importDevices` or by hand, through a group job.
    static let unindexableBundle = String((0..<2_700).map { _ in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".randomElement()! })

    static func countsRecorded(in recorder: RegistryRecorder) {
        recorder.count(bundleID: "com.a", end: .delivered, count: 3)
        recorder.count(bundleID: unindexableBundle, end: .delivered, count: 5)
        recorder.count(bundleID: "com.b", end: .invalidToken, count: 2)
        recorder.count(bundleID: unindexableBundle, end: .dead, count: 1)
    }

    /// Was: PostgreSQL refused the batch (SQLSTATE 54000, index row size) at every flush, the
    /// batch was merged back, and no count of any bundle was written again.
    @Test func aCountPostgreSQLRefusesIsDroppedAloneWithOneErrorLine() async throws {
        let settings = try await TestPostgres.freshDatabase()
        let log = CapturedLog(label: "recorder-test")
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            let recorder = RegistryRecorder(store: store, flushInterval: .seconds(3600), logger: log.logger)
            Self.countsRecorded(in: recorder)
            #expect(await recorder.flush())
            #expect(recorder.pending.countKeys == 0, "the refused counts are not retried for ever")
            let written = try await store.counts(sinceEpochSeconds: 0).map { "\($0.bundleId) \($0.end) \($0.count)" }.sorted()
            #expect(written == ["com.a delivered 3", "com.b invalidToken 2"])
        }
        let errors = log.entries.filter { $0.level == .error }
        #expect(errors.count == 1, "\(errors.map(\.message))")
        #expect(errors.first?.message == "counts dropped: PostgreSQL refused their rows")
        #expect(errors.first?.metadata["registry.dropped_count_keys"] == "2")
        #expect(errors.first?.metadata["registry.dropped_counts"] == "6")
        #expect(errors.first?.metadata["error"]?.contains("SQLSTATE 54000") == true)
        #expect(errors.first?.metadata["apns.bundles"]?.contains("(2700 bytes)") == true)
    }

    /// A registry that does not answer is an outage, not a refusal: every count is kept, the one
    /// PostgreSQL would refuse too (nothing is known of it yet), and nothing is logged as dropped.
    @Test func anUnavailableRegistryKeepsEveryCount() async throws {
        let settings = RegistrySettings(url: try PostgresURL(parsing: "postgres://apns:apns@127.0.0.1:\(unreachablePort)/nothing?sslmode=disable"))
        let log = CapturedLog(label: "recorder-test")
        try await TestPostgres.withStore(settings, operationTimeout: .seconds(2)) { store in
            let recorder = RegistryRecorder(store: store, flushInterval: .seconds(3600), logger: log.logger)
            Self.countsRecorded(in: recorder)
            #expect(await recorder.flush() == false)
            #expect(recorder.pending.countKeys == 4)
        }
        #expect(log.entries.allSatisfy { $0.level < .error }, "\(log.entries.map(\.message))")
    }
}
