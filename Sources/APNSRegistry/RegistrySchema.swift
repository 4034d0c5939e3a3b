/// The registry's schema as numbered migrations (contract §6). Applied in order by
/// `RegistryStore.migrate()`, each once, inside one transaction that holds an advisory lock, so
/// several instances starting at once are safe. A new version appends; an applied one never changes.
public enum RegistrySchema {
    /// `pg_advisory_xact_lock` key of the migrations ('apns' in ASCII).
    public static let advisoryLockKey: Int64 = 0x6170_6E73

    public static let migrations: [(version: Int, statements: [String])] = [
        (1, [
            """
            CREATE TABLE apns_devices (
                bundle_id text NOT NULL,
                token text NOT NULL,
                group_name text,
                environment text NOT NULL DEFAULT 'production',
                registered boolean NOT NULL,
                changed_at bigint NOT NULL,
                registered_at bigint,
                invalid_reason text,
                invalid_at bigint,
                updated_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (bundle_id, token)
            )
            """,
            // A group's active devices, in the order fan-out pages through them.
            """
            CREATE INDEX apns_devices_group_active ON apns_devices (group_name, bundle_id, token)
                WHERE registered AND invalid_reason IS NULL
            """,
            "CREATE INDEX apns_devices_group ON apns_devices (group_name)",
            """
            CREATE TABLE apns_counts (
                bundle_id text NOT NULL,
                hour timestamptz NOT NULL,
                end_kind text NOT NULL,
                count bigint NOT NULL,
                PRIMARY KEY (bundle_id, hour, end_kind)
            )
            """,
            "CREATE INDEX apns_counts_hour ON apns_counts (hour)",
        ]),
        // The sync window of each device (contract §6, `SyncWindowState`), on the device's own
        // row: the fan-out page that reads the devices reads their windows with them.
        (2, [
            """
            ALTER TABLE apns_devices
                ADD COLUMN window_end bigint,
                ADD COLUMN window_opened_by uuid,
                ADD COLUMN window_version bigint NOT NULL DEFAULT 0,
                ADD COLUMN trailing_group_job uuid,
                ADD COLUMN trailing_body text,
                ADD COLUMN trailing_claimed_until bigint
            """,
            // The trailing pushes waiting, in the order they fall due: what the pusher polls.
            "CREATE INDEX apns_devices_trailing_due ON apns_devices (window_end) WHERE trailing_body IS NOT NULL",
        ]),
    ]

    public static var latestVersion: Int { migrations.last?.version ?? 0 }
}
