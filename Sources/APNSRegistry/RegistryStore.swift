import APNSModel
import APNSRegistryMessages
import Foundation
import Logging
import PostgresNIO

/// The only type that talks to PostgreSQL: a pooled `PostgresClient` (run it with `run()`), the
/// migrations, and one method per question or change of contract §6. Every call is bounded by
/// `operationTimeout`, so a database that is down surfaces as an error within that time.
public final class RegistryStore: Sendable {
    public let client: PostgresClient
    let logger: Logger
    public let operationTimeout: Duration

    public init(client: PostgresClient, logger: Logger, operationTimeout: Duration = .seconds(10)) {
        self.client = client
        self.logger = logger
        self.operationTimeout = operationTimeout
    }

    /// Runs the pool until cancelled or graceful shutdown.
    public func run() async { await client.run() }

    // MARK: - Schema

    /// Applies every migration not applied yet, under the advisory lock; returns the versions applied.
    @discardableResult
    public func migrate() async throws -> [Int] {
        try await bounded(.seconds(120)) { [client, logger] in
            try await client.withConnection { connection in
                try await connection.query("BEGIN", logger: logger)
                do {
                    try await connection.query("SELECT pg_advisory_xact_lock(\(RegistrySchema.advisoryLockKey))", logger: logger)
                    try await connection.query(
                        "CREATE TABLE IF NOT EXISTS apns_schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
                        logger: logger)
                    var current = 0
                    for try await version in try await connection.query(
                        "SELECT coalesce(max(version), 0)::integer FROM apns_schema_migrations", logger: logger
                    ).decode(Int32.self) {
                        current = Int(version)
                    }
                    var applied: [Int] = []
                    for migration in RegistrySchema.migrations where migration.version > current {
                        for statement in migration.statements {
                            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                        }
                        let version = Int32(migration.version)
                        try await connection.query("INSERT INTO apns_schema_migrations (version) VALUES (\(version))", logger: logger)
                        applied.append(migration.version)
                    }
                    try await connection.query("COMMIT", logger: logger)
                    return applied
                } catch {
                    _ = try? await connection.query("ROLLBACK", logger: logger)
                    throw error
                }
            }
        }
    }

    /// A cheap round trip: is the registry reachable?
    public func ping() async throws {
        try await bounded { [client, logger] in
            try await client.query("SELECT 1", logger: logger)
        }
    }

    // MARK: - Registrations

    /// Applies one change, last writer wins by `at` (an unregister wins a tie, so the end state
    /// never depends on arrival order); returns whether it changed the device.
    @discardableResult
    public func apply(_ message: RegistrationMessage) async throws -> Bool {
        try await bounded { [client, logger] in
            let rows: PostgresRowSequence
            switch message.op {
            case .register:
                let group = message.group ?? ""
                rows = try await client.query(
                    """
                    INSERT INTO apns_devices AS d (bundle_id, token, group_name, environment, registered, changed_at, registered_at)
                    VALUES (\(message.bundleID), \(message.token), \(group), \(message.environment.rawValue), true, \(message.at), \(message.at))
                    ON CONFLICT (bundle_id, token) DO UPDATE SET
                        group_name = EXCLUDED.group_name, environment = EXCLUDED.environment, registered = true,
                        changed_at = EXCLUDED.changed_at, registered_at = EXCLUDED.registered_at,
                        invalid_reason = CASE WHEN d.invalid_at >= EXCLUDED.registered_at THEN d.invalid_reason END,
                        invalid_at = CASE WHEN d.invalid_at >= EXCLUDED.registered_at THEN d.invalid_at END,
                        updated_at = now()
                    WHERE d.changed_at < EXCLUDED.changed_at
                    RETURNING 1
                    """, logger: logger)
            case .unregister:
                rows = try await client.query(
                    """
                    INSERT INTO apns_devices AS d (bundle_id, token, registered, changed_at)
                    VALUES (\(message.bundleID), \(message.token), false, \(message.at))
                    ON CONFLICT (bundle_id, token) DO UPDATE SET registered = false, changed_at = EXCLUDED.changed_at, updated_at = now()
                    WHERE d.changed_at < EXCLUDED.changed_at OR (d.changed_at = EXCLUDED.changed_at AND d.registered)
                    RETURNING 1
                    """, logger: logger)
            }
            var changed = false
            for try await _ in rows { changed = true }
            return changed
        }
    }

    /// Registers many devices of one bundle in one group at once (benchmarks, imports); devices
    /// the registry already holds are left as they are.
    public func importDevices(bundleID: String, tokens: [String], group: String, at: Int64) async throws {
        guard !tokens.isEmpty else { return }
        try await bounded(.seconds(300)) { [client, logger] in
            let lower = tokens.map { $0.lowercased() }
            try await client.query(
                """
                INSERT INTO apns_devices (bundle_id, token, group_name, environment, registered, changed_at, registered_at)
                SELECT \(bundleID), t, \(group), 'production', true, \(at), \(at) FROM unnest(\(lower)::text[]) AS t
                ON CONFLICT (bundle_id, token) DO NOTHING
                """, logger: logger)
        }
    }

    // MARK: - Group fan-out

    /// One page of a group's active devices (registered, not invalid) after `after`, in
    /// (bundle ID, token) order: fan-out reads a group of any size with bounded memory.
    public func activeDevices(group: String, after: DevicePosition?, limit: Int) async throws -> [ActiveDevice] {
        try await bounded { [client, logger] in
            let bundle = after?.bundleID ?? ""
            let token = after?.token ?? ""
            let rows = try await client.query(
                """
                SELECT bundle_id, token, environment FROM apns_devices
                WHERE group_name = \(group) AND registered AND invalid_reason IS NULL AND (bundle_id, token) > (\(bundle), \(token))
                ORDER BY bundle_id, token LIMIT \(Int64(limit))
                """, logger: logger)
            var devices: [ActiveDevice] = []
            for try await (bundleID, token, environment) in rows.decode((String, String, String).self) {
                devices.append(ActiveDevice(bundleID: bundleID, token: token, environment: APNSEnvironment(rawValue: environment) ?? .production))
            }
            return devices
        }
    }

    // MARK: - Invalid tokens and counts

    /// Marks devices invalid, each unless it registered after Apple's timestamp.
    public func markInvalid(_ marks: [InvalidMark]) async throws {
        guard !marks.isEmpty else { return }
        try await bounded { [client, logger] in
            let bundles = marks.map(\.bundleID), tokens = marks.map(\.token), reasons = marks.map(\.reason), ats = marks.map(\.at)
            try await client.query(
                """
                UPDATE apns_devices d SET invalid_reason = m.reason, invalid_at = m.at, updated_at = now()
                FROM unnest(\(bundles)::text[], \(tokens)::text[], \(reasons)::text[], \(ats)::bigint[]) AS m(bundle_id, token, reason, at)
                WHERE d.bundle_id = m.bundle_id AND d.token = m.token AND d.registered
                    AND (d.registered_at IS NULL OR d.registered_at <= m.at)
                """, logger: logger)
        }
    }

    /// Adds a batch of counts to what every instance wrote before.
    public func addCounts(_ batch: [CountAggregator.Key: Int64]) async throws {
        guard !batch.isEmpty else { return }
        let keys = batch.keys.sorted()
        try await bounded { [client, logger] in
            let bundles = keys.map(\.bundleID), hours = keys.map(\.hour), ends = keys.map(\.end), counts = keys.map { batch[$0]! }
            try await client.query(
                """
                INSERT INTO apns_counts AS c (bundle_id, hour, end_kind, count)
                SELECT b, to_timestamp(h), e, n FROM unnest(\(bundles)::text[], \(hours)::bigint[], \(ends)::text[], \(counts)::bigint[]) AS t(b, h, e, n)
                ON CONFLICT (bundle_id, hour, end_kind) DO UPDATE SET count = c.count + EXCLUDED.count
                """, logger: logger)
        }
    }

    /// Counts of every hour from `sinceEpochSeconds` on, summed over instances, for the
    /// `bundleLimit` bundle IDs with the most notifications in that time (see `countSummary`).
    public func counts(sinceEpochSeconds: Int64, bundleLimit: Int = RegistryStore.countedBundleLimit) async throws -> [CountRow] {
        try await countSummary(sinceEpochSeconds: sinceEpochSeconds, bundleLimit: bundleLimit).rows
    }

    /// Counts of every hour from `sinceEpochSeconds` on, summed over instances, of the
    /// `bundleLimit` bundle IDs with the most notifications in that time (ties by bundle ID), with
    /// how many bundle IDs and notifications were left out. Bounded in SQL because a bundle ID
    /// comes from outside: a group job counts an end under every device's bundle, and anyone
    /// allowed to publish on `apns.registry` can register devices of as many bundle IDs as they like.
    public func countSummary(sinceEpochSeconds: Int64, bundleLimit: Int = RegistryStore.countedBundleLimit) async throws -> CountSummary {
        let limit = Int64(max(bundleLimit, 1))
        return try await bounded { [client, logger] in
            let rows = try await client.query(
                """
                WITH per_bundle AS (
                    SELECT bundle_id, sum(count) AS total FROM apns_counts
                    WHERE hour >= to_timestamp(\(sinceEpochSeconds)) GROUP BY bundle_id),
                shown AS (SELECT bundle_id FROM per_bundle ORDER BY total DESC, bundle_id LIMIT \(limit))
                SELECT c.bundle_id, extract(epoch FROM c.hour)::bigint, c.end_kind, c.count,
                    (SELECT count(*) FROM per_bundle), (SELECT coalesce(sum(total), 0)::bigint FROM per_bundle)
                FROM apns_counts c JOIN shown USING (bundle_id)
                WHERE c.hour >= to_timestamp(\(sinceEpochSeconds)) ORDER BY c.hour, c.bundle_id, c.end_kind
                """, logger: logger)
            var summary = CountSummary(rows: [], bundles: 0, bundlesNotShown: 0, countNotShown: 0)
            var everything: Int64 = 0
            for try await (bundle, hour, end, count, bundles, total) in rows.decode((String, Int64, String, Int64, Int64, Int64).self) {
                summary.rows.append(CountRow(bundleId: bundle, hour: hour, end: end, count: count))
                summary.bundles = bundles
                everything = total
            }
            let shown = Set(summary.rows.map(\.bundleId)).count
            summary.bundlesNotShown = max(summary.bundles - Int64(shown), 0)
            summary.countNotShown = max(everything - summary.rows.reduce(0) { $0 &+ $1.count }, 0)
            return summary
        }
    }

    /// How many bundle IDs `counts` and `countSummary` return by default: the admin page draws a
    /// chart of up to 48 hours × 8 ends for each.
    public static let countedBundleLimit = 50

    // MARK: - Operators

    public func device(bundleID: String, token: String) async throws -> DeviceRecord? {
        try await records(where: "bundle_id = $1 AND token = $2", [bundleID, token.lowercased()], limit: 1).first
    }

    /// Every device the registry holds for a group (active, invalid and unregistered).
    public func devices(group: String, limit: Int = 10_000) async throws -> [DeviceRecord] {
        try await records(where: "group_name = $1", [group], limit: limit)
    }

    /// Per bundle ID: registered devices not marked invalid, and those marked invalid, for the
    /// `limit` bundle IDs with the most such devices (ties by bundle ID), with how many bundle IDs
    /// and devices the rest hold. Bounded in SQL: anyone allowed to publish on `apns.registry` can
    /// register one device in each of millions of bundle IDs, and the admin page draws this.
    public func deviceCounts(limit: Int = RegistryStore.deviceCountBundleLimit) async throws -> DeviceCountSummary {
        let limit = Int64(max(limit, 1))
        return try await bounded { [client, logger] in
            let rows = try await client.query(
                """
                WITH per_bundle AS (
                    SELECT bundle_id, count(*) FILTER (WHERE registered AND invalid_reason IS NULL) AS active,
                        count(*) FILTER (WHERE registered AND invalid_reason IS NOT NULL) AS invalid
                    FROM apns_devices GROUP BY bundle_id)
                SELECT bundle_id, active, invalid, count(*) OVER (), (sum(active) OVER ())::bigint, (sum(invalid) OVER ())::bigint
                FROM per_bundle ORDER BY active + invalid DESC, bundle_id LIMIT \(limit)
                """, logger: logger)
            var summary = DeviceCountSummary(bundles: [], bundlesNotShown: 0, activeNotShown: 0, invalidNotShown: 0)
            for try await (bundle, active, invalid, bundles, allActive, allInvalid) in rows.decode(
                (String, Int64, Int64, Int64, Int64, Int64).self)
            {
                summary.bundles.append(BundleDeviceCount(bundleId: bundle, active: active, invalid: invalid))
                summary.bundlesNotShown = bundles
                summary.activeNotShown = allActive
                summary.invalidNotShown = allInvalid
            }
            summary.bundlesNotShown -= Int64(summary.bundles.count)
            summary.activeNotShown -= summary.bundles.reduce(0) { $0 + $1.active }
            summary.invalidNotShown -= summary.bundles.reduce(0) { $0 + $1.invalid }
            return summary
        }
    }

    /// How many bundle IDs `deviceCounts` returns by default (one table row each on the page).
    public static let deviceCountBundleLimit = 500

    private func records(where condition: String, _ values: [String], limit: Int) async throws -> [DeviceRecord] {
        try await bounded { [client, logger] in
            var bindings = PostgresBindings()
            for value in values { bindings.append(value) }
            let query = PostgresQuery(
                unsafeSQL: """
                    SELECT bundle_id, token, group_name, environment, registered, changed_at, registered_at, invalid_reason, invalid_at
                    FROM apns_devices WHERE \(condition) ORDER BY bundle_id, token LIMIT \(limit)
                    """, binds: bindings)
            var out: [DeviceRecord] = []
            let rows = try await client.query(query, logger: logger)
            for try await (bundle, token, group, environment, registered, changedAt, registeredAt, reason, invalidAt) in rows.decode(
                (String, String, String?, String, Bool, Int64, Int64?, String?, Int64?).self)
            {
                out.append(
                    DeviceRecord(
                        bundleId: bundle, token: token, group: group, environment: environment,
                        state: !registered ? .unregistered : (reason == nil ? .active : .invalid),
                        changedAt: changedAt, registeredAt: registeredAt, invalidReason: reason, invalidAt: invalidAt))
            }
            return out
        }
    }

    /// `body`, failing with `RegistryUnavailable` when it takes longer than `limit`.
    @discardableResult
    func bounded<T: Sendable>(_ limit: Duration? = nil, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let limit = limit ?? operationTimeout
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else {
                throw RegistryUnavailable(detail: "no answer from PostgreSQL within \(limit)")
            }
            return value
        }
    }
}

/// The registry did not answer in time.
public struct RegistryUnavailable: Error, CustomStringConvertible {
    public var detail: String
    public var description: String { detail }
}
