import AMQPClient
import APNSConfig
import APNSModel
import APNSRegistry
import APNSRegistryMessages
import APNSTopologyNames
import APNSWorkerClient
import ArgumentParser
import Foundation
import Logging

/// Where a registry command finds PostgreSQL: `--postgres-url`, then the configuration file's
/// `[registry]` (with its environment overrides), then `APNS_WORKER_REGISTRY_URL`.
struct RegistryOptions: ParsableArguments {
    @Option(name: .customLong("config"), help: "Configuration file whose [registry] (and [amqp]) section to use.")
    var configPath: String?

    @Option(name: .customLong("postgres-url"), help: "PostgreSQL URL (overrides --config).")
    var postgresURL: String?

    func settings() throws -> RegistrySettings {
        if let postgresURL {
            do { return RegistrySettings(url: try PostgresURL(parsing: postgresURL)) } catch { throw ValidationError("--postgres-url: \(error)") }
        }
        if let configPath {
            guard let registry = try loadConfiguration(configPath, credentials: .skipFiles).registry else {
                throw ValidationError("\(configPath) has no [registry] section")
            }
            return registry
        }
        if let url = ProcessInfo.processInfo.environment["APNS_WORKER_REGISTRY_URL"], !url.isEmpty {
            do { return RegistrySettings(url: try PostgresURL(parsing: url)) } catch { throw ValidationError("APNS_WORKER_REGISTRY_URL: \(error)") }
        }
        throw ValidationError("give --config FILE (with a [registry] section), --postgres-url or APNS_WORKER_REGISTRY_URL")
    }

    /// Runs `body` with a store whose pool runs meanwhile.
    func withStore<T: Sendable>(_ body: @escaping @Sendable (RegistryStore) async throws -> T) async throws -> T {
        let settings = try settings()
        let store = try RegistryStore(settings: settings, logger: makeLogger("apns-worker.registry", defaultLevel: .warning))
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

/// `apns-worker registry`: the device registry of contract §6.
struct RegistryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "registry",
        abstract: "The device registry (PostgreSQL): migrate, show, register, unregister.",
        subcommands: [Migrate.self, Show.self, Register.self, Unregister.self])

    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create or migrate the registry's schema (what `run` does at start).")
        @OptionGroup var registry: RegistryOptions

        func run() async throws {
            let settings = try registry.settings()
            do {
                let applied = try await RegistryStore.migrateAtStartUp(settings, logger: makeLogger("apns-worker.registry", defaultLevel: .warning))
                print(applied.isEmpty
                    ? "registry schema already at version \(RegistrySchema.latestVersion)"
                    : "registry schema migrated to version \(RegistrySchema.latestVersion) (applied \(applied.map(String.init).joined(separator: ", ")))")
            } catch {
                FileHandle.standardError.write(Data("\(error)\n".utf8))
                throw ExitCode.failure
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a group's devices, or one device (JSON).")
        @OptionGroup var registry: RegistryOptions
        @Option(help: "A group: every device the registry holds for it.")
        var group: String?
        @Option(help: "With --token: the device's bundle ID.")
        var bundle: String?
        @Option(help: "With --bundle: the device token (hex).")
        var token: String?

        func run() async throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            if let group {
                let devices = try await registry.withStore { try await $0.devices(group: group) }
                print(String(decoding: try encoder.encode(GroupView(group: group, devices: devices)), as: UTF8.self))
            } else if let bundle, let token {
                guard let device = try await registry.withStore({ try await $0.device(bundleID: bundle, token: token) }) else {
                    FileHandle.standardError.write(Data("no device \(bundle) \(DeviceToken(hex: token)?.redacted ?? "?") in the registry\n".utf8))
                    throw ExitCode.failure
                }
                print(String(decoding: try encoder.encode(device), as: UTF8.self))
            } else {
                throw ValidationError("give --group G, or --bundle B --token HEX")
            }
        }
    }

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Publish a register message to apns.registry (confirmed), as the sync server would.")
        @OptionGroup var broker: BrokerOptions
        @Option var bundle: String
        @Option var token: String
        @Option var group: String
        @Option(help: "production (default) or sandbox.")
        var environment: String?
        @Option(help: "ms since the epoch (default now).")
        var at: Int64?

        func run() async throws {
            let env = try environment.map { name in
                guard let value = APNSEnvironment(rawValue: name) else { throw ValidationError("--environment: production or sandbox") }
                return value
            }
            try await publishRegistration(
                Registration(operation: .register, bundleID: bundle, token: token, group: group, environment: env, at: at ?? nowMilliseconds()),
                broker: broker)
        }
    }

    struct Unregister: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Publish an unregister message to apns.registry (confirmed).")
        @OptionGroup var broker: BrokerOptions
        @Option var bundle: String
        @Option var token: String
        @Option(help: "ms since the epoch (default now).")
        var at: Int64?

        func run() async throws {
            try await publishRegistration(
                Registration(operation: .unregister, bundleID: bundle, token: token, group: nil, at: at ?? nowMilliseconds()), broker: broker)
        }
    }
}

struct GroupView: Codable {
    var group: String
    var devices: [DeviceRecord]
}

func nowMilliseconds() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

/// Publishes a registration through `APNSWorkerClient` (validated as the worker would, confirmed).
func publishRegistration(_ registration: Registration, broker: BrokerOptions) async throws {
    let client = try await APNSWorkerClient.connect(
        configuration: try broker.amqpConfiguration(connectionName: "apns-worker registry"),
        logger: broker.logger("apns-worker.registry"))
    do {
        try await client.publish(registration)
    } catch {
        switch error {
        case .invalidMessage, .payloadTooLarge: failWithLine("the worker would refuse this registration, nothing published: \(error)")
        default: failWithLine("not published: \(error)")
        }
    }
    await client.close()
    print("published \(registration.operation.rawValue) to \(TopologyNames.registry) (confirmed)")
}

/// `apns-worker stats`: counts per bundle ID, UTC hour and end, summed over every instance.
struct StatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats", abstract: "Notification counts per bundle ID, UTC hour and end, from the registry.")
    @OptionGroup var registry: RegistryOptions
    @Option(help: "Hours back from now.")
    var hours: Int = 48
    @Option(help: "At most this many bundle IDs, those with the most notifications; the rest are summed in one line.")
    var bundles: Int = RegistryStore.countedBundleLimit
    @Flag(help: "JSON output.")
    var json = false

    func validate() throws {
        guard bundles >= 1 else { throw ValidationError("--bundles must be at least 1") }
    }

    func run() async throws {
        let now = Int64(Date().timeIntervalSince1970)
        let since = CountAggregator.hour(ofEpochSeconds: now) - Int64(max(hours - 1, 0)) * 3600
        let summary = try await registry.withStore { [bundles] in try await $0.countSummary(sinceEpochSeconds: since, bundleLimit: bundles) }
        let rows = summary.rows
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            let output = StatsOutput(counts: rows, bundlesNotShown: summary.bundlesNotShown, countNotShown: summary.countNotShown)
            print(String(decoding: try encoder.encode(output), as: UTF8.self))
            return
        }
        let ends = JobEnd.registryEnds.compactMap(\.contractName)
        print((["hour (UTC)", "bundle"] + ends).joined(separator: "\t"))
        var table: [String: [String: Int64]] = [:]
        var order: [String] = []
        for row in rows {
            let key = "\(RFC3339.string(from: Date(timeIntervalSince1970: TimeInterval(row.hour))))\t\(row.bundleId)"
            if table[key] == nil { order.append(key) }
            table[key, default: [:]][row.end, default: 0] += row.count
        }
        for key in order {
            print(([key] + ends.map { "\(table[key]?[$0] ?? 0)" }).joined(separator: "\t"))
        }
        if summary.bundlesNotShown > 0 {
            print("\(summary.bundlesNotShown) more bundle IDs not shown, with \(summary.countNotShown) notifications (see --bundles)")
        }
    }

    /// `--json`: the rows shown and what the bundle IDs left out counted.
    struct StatsOutput: Encodable {
        var counts: [CountRow]
        var bundlesNotShown: Int64
        var countNotShown: Int64
    }
}
