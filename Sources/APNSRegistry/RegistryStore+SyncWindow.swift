import APNSModel
import Foundation
import PostgresNIO

/// A device a background group job reaches, with its sync window as read.
public struct WindowedDevice: Sendable, Hashable {
    public var device: ActiveDevice
    public var window: SyncWindowState
    public init(device: ActiveDevice, window: SyncWindowState) {
        self.device = device
        self.window = window
    }
}

/// One device's new window, written only if its version is still `window.version`.
public struct SyncWindowWrite: Sendable, Hashable {
    public var position: DevicePosition
    /// The state decided; `version` is the one it was decided on.
    public var window: SyncWindowState
    /// The trailing push's section-2 job body when `window.trailing` is set.
    public var trailingBody: [UInt8]?
    public init(position: DevicePosition, window: SyncWindowState, trailingBody: [UInt8]?) {
        self.position = position
        self.window = window
        self.trailingBody = trailingBody
    }
}

/// A trailing push whose window has ended, claimed for a while by this instance.
public struct DueTrailingPush: Sendable, Hashable {
    public var device: ActiveDevice
    public var window: SyncWindowState
    /// The section-2 job, built when the latest group job was merged.
    public var body: [UInt8]
    /// Still registered and not invalid: otherwise the push is dropped, not sent.
    public var active: Bool
}

/// The sync window's storage (contract §6). Every statement takes its time from the database's
/// clock (`nowMS`), one clock for every instance. Writes are compare-and-set on
/// `window_version`, so two instances fanning out group jobs of one group at once cannot both
/// open a device's window: the one that loses reads the device again and decides again.
extension RegistryStore {
    static let nowMS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

    /// One fan-out page of a group's active devices with their windows, and the database's now:
    /// the same page as `activeDevices`, in the same single round trip.
    public func activeDevicesWithWindows(group: String, after: DevicePosition?, limit: Int) async throws -> (now: Int64, devices: [WindowedDevice]) {
        try await bounded { [self, client, logger] in
            let bundle = after?.bundleID ?? "", token = after?.token ?? ""
            let rows = try await client.query(
                """
                SELECT bundle_id, token, environment, window_end, window_opened_by, trailing_group_job, window_version, \(unescaped: Self.nowMS)
                FROM apns_devices
                WHERE group_name = \(group) AND registered AND invalid_reason IS NULL AND (bundle_id, token) > (\(bundle), \(token))
                ORDER BY bundle_id, token LIMIT \(Int64(limit))
                """, logger: logger)
            return try await self.windowedDevices(rows)
        }
    }

    /// The windows of `positions` again (after a lost compare-and-set), and the database's now.
    public func windows(of positions: [DevicePosition]) async throws -> (now: Int64, devices: [WindowedDevice]) {
        try await bounded { [self, client, logger] in
            let rows = try await client.query(
                """
                SELECT d.bundle_id, d.token, d.environment, d.window_end, d.window_opened_by, d.trailing_group_job, d.window_version,
                    \(unescaped: Self.nowMS)
                FROM apns_devices d JOIN unnest(\(positions.map(\.bundleID))::text[], \(positions.map(\.token))::text[]) AS p(b, t)
                    ON d.bundle_id = p.b AND d.token = p.t
                WHERE d.registered AND d.invalid_reason IS NULL
                """, logger: logger)
            return try await self.windowedDevices(rows)
        }
    }

    private func windowedDevices(_ rows: PostgresRowSequence) async throws -> (now: Int64, devices: [WindowedDevice]) {
        var now: Int64 = 0
        var devices: [WindowedDevice] = []
        for try await (bundleID, token, environment, end, openedBy, trailing, version, clock) in rows.decode(
            (String, String, String, Int64?, UUID?, UUID?, Int64, Int64).self)
        {
            now = clock
            devices.append(
                WindowedDevice(
                    device: ActiveDevice(bundleID: bundleID, token: token, environment: APNSEnvironment(rawValue: environment) ?? .production),
                    window: SyncWindowState(windowEnd: end, openedBy: openedBy, trailing: trailing, version: version)))
        }
        if devices.isEmpty { now = try await currentTimeMS() }
        return (now, devices)
    }

    /// Writes the windows whose version is unchanged, in one statement; returns the devices
    /// written (the others changed meanwhile: decide again). A write clears any claim on the
    /// device's trailing push, so a push merged after a claim is sent by the next poll.
    ///
    /// Rows are locked in (bundle ID, token) order, whoever writes (fan-outs of one group at once,
    /// the trailing pusher), so two writers wait for each other but never deadlock; a deadlock
    /// reported anyway (another statement's order) is retried, not taken for an outage.
    public func storeWindows(_ writes: [SyncWindowWrite]) async throws -> Set<DevicePosition> {
        guard !writes.isEmpty else { return [] }
        let writes = writes.sorted { ($0.position.bundleID, $0.position.token) < ($1.position.bundleID, $1.position.token) }
        var attempt = 0
        while true {
            do {
                return try await storeWindowsOnce(writes)
            } catch let error as PSQLError where attempt < 3 && ["40P01", "40001"].contains(error.serverInfo?[.sqlState]) {
                attempt += 1
                logger.debug("sync window write retried", metadata: ["registry.sqlstate": "\(error.serverInfo?[.sqlState] ?? "")"])
            }
        }
    }

    private func storeWindowsOnce(_ writes: [SyncWindowWrite]) async throws -> Set<DevicePosition> {
        try await bounded { [client, logger] in
            // Arrays of non-optional text: '' stands for NULL (no UUID or job body is empty).
            let bundles = writes.map(\.position.bundleID), tokens = writes.map(\.position.token)
            let versions = writes.map(\.window.version), ends = writes.map { $0.window.windowEnd ?? -1 }
            let openedBy = writes.map { $0.window.openedBy?.uuidString.lowercased() ?? "" }
            let trailing = writes.map { $0.window.trailing?.uuidString.lowercased() ?? "" }
            let bodies = writes.map { $0.trailingBody.map { String(decoding: $0, as: UTF8.self) } ?? "" }
            let rows = try await client.query(
                """
                WITH w AS (
                    SELECT * FROM unnest(\(bundles)::text[], \(tokens)::text[], \(versions)::bigint[], \(ends)::bigint[],
                        \(openedBy)::text[], \(trailing)::text[], \(bodies)::text[])
                        AS w(bundle_id, token, version, window_end, opened_by, trailing_job, body)
                ), locked AS (
                    SELECT d.bundle_id, d.token FROM apns_devices d JOIN w
                        ON d.bundle_id = w.bundle_id AND d.token = w.token AND d.window_version = w.version
                    ORDER BY d.bundle_id, d.token FOR UPDATE OF d
                )
                UPDATE apns_devices d SET
                    window_end = NULLIF(w.window_end, -1), window_opened_by = NULLIF(w.opened_by, '')::uuid,
                    trailing_group_job = NULLIF(w.trailing_job, '')::uuid, trailing_body = NULLIF(w.body, ''),
                    trailing_claimed_until = NULL, window_version = d.window_version + 1
                FROM w JOIN locked USING (bundle_id, token)
                WHERE d.bundle_id = w.bundle_id AND d.token = w.token AND d.window_version = w.version
                RETURNING d.bundle_id, d.token
                """, logger: logger)
            var written: Set<DevicePosition> = []
            for try await (bundleID, token) in rows.decode((String, String).self) {
                written.insert(DevicePosition(bundleID: bundleID, token: token))
            }
            return written
        }
    }

    /// Claims up to `limit` trailing pushes whose window has ended and that nobody claimed in
    /// the last `leaseMS`, oldest first, in one statement (`SKIP LOCKED`: instances polling at
    /// once take different rows). A claim that is never completed (the instance died) runs out
    /// after `leaseMS` and the push is claimed again.
    public func claimDueTrailingPushes(limit: Int, leaseMS: Int64) async throws -> (now: Int64, pushes: [DueTrailingPush]) {
        try await bounded { [self, client, logger] in
            let rows = try await client.query(
                """
                WITH now AS (SELECT \(unescaped: Self.nowMS) AS ms),
                due AS (
                    SELECT bundle_id, token FROM apns_devices, now
                    WHERE trailing_body IS NOT NULL AND window_end <= now.ms
                        AND (trailing_claimed_until IS NULL OR trailing_claimed_until <= now.ms)
                    ORDER BY window_end LIMIT \(Int64(limit)) FOR UPDATE OF apns_devices SKIP LOCKED
                )
                UPDATE apns_devices d SET trailing_claimed_until = now.ms + \(leaseMS)
                FROM due, now WHERE d.bundle_id = due.bundle_id AND d.token = due.token
                RETURNING d.bundle_id, d.token, d.environment, d.window_end, d.window_opened_by, d.trailing_group_job, d.window_version,
                    d.trailing_body, (d.registered AND d.invalid_reason IS NULL), now.ms
                """, logger: logger)
            var now: Int64? = nil
            var pushes: [DueTrailingPush] = []
            for try await (bundleID, token, environment, end, openedBy, trailing, version, body, active, clock) in rows.decode(
                (String, String, String, Int64?, UUID?, UUID?, Int64, String, Bool, Int64).self)
            {
                now = clock
                pushes.append(
                    DueTrailingPush(
                        device: ActiveDevice(bundleID: bundleID, token: token, environment: APNSEnvironment(rawValue: environment) ?? .production),
                        window: SyncWindowState(windowEnd: end, openedBy: openedBy, trailing: trailing, version: version),
                        body: Array(body.utf8), active: active))
            }
            if let now { return (now, pushes) }
            return (try await self.currentTimeMS(), pushes)
        }
    }

    /// The database's clock, ms since the epoch.
    public func currentTimeMS() async throws -> Int64 {
        let rows = try await client.query("SELECT \(unescaped: Self.nowMS)", logger: logger)
        for try await now in rows.decode(Int64.self) { return now }
        throw RegistryUnavailable(detail: "PostgreSQL returned no time")
    }
}
