/// `apns-worker fleet`, `pause` and `resume` (contract §5): what every live instance says in
/// its heartbeats, and the fleet-wide pause of a bundle, from any machine that reaches the broker.
import AMQPClient
import APNSConfig
import APNSFleet
import APNSModel
import APNSTopology
import APNSWorker
import ArgumentParser
import Foundation
import Logging

struct FleetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet",
        abstract: "List the live worker instances (from their heartbeats on apns.fleet) and the paused bundles.")

    @OptionGroup var broker: BrokerOptions

    @Option(help: "How long to listen (default: the configuration's [admin] heartbeatInterval, else 5s, plus 1s, so every live instance speaks once).", transform: parseDuration)
    var wait: Duration?

    @Flag(help: "JSON output: {\"instances\": [...], \"paused\": [...]}.")
    var json = false

    func run() async throws {
        let broker = self.broker.orDefaultConfiguration()
        let configuration = try broker.configPath.map { try loadConfiguration($0, credentials: .skipFiles) }
        let interval = configuration?.admin.heartbeatInterval ?? AdminSettings.defaultHeartbeatInterval
        let logger = broker.logger("apns-worker.fleet")
        let amqp = try broker.amqpConfiguration(connectionName: "apns-worker fleet")
        let report = try await AMQPConnection.withConnection(configuration: amqp, logger: logger) { connection in
            try await FleetControl.listen(
                on: connection, for: wait ?? interval + .seconds(1), bundleIDs: configuration?.bundles.map(\.bundleID) ?? [], logger: logger)
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
            encoder.dateEncodingStrategy = .rfc3339
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
            return
        }
        print(Self.table(report, now: Date()))
    }

    static func table(_ report: FleetReport, now: Date) -> String {
        var lines = [["instance", "host", "pid", "version", "started", "last seen", "RSS MiB", "CPU s", "in flight", "broker", "held"].joined(separator: "\t")]
        for instance in report.instances {
            lines.append([
                instance.id, instance.host, String(instance.pid), instance.version, RFC3339.string(from: instance.startedAt),
                instance.lastSeen.map { "\(Int(now.timeIntervalSince($0).rounded()))s ago" } ?? "-",
                String(format: "%.1f", Double(instance.rssBytes) / 1_048_576), String(format: "%.1f", instance.cpuSeconds),
                String(instance.inFlight), instance.broker, instance.heldBundles.joined(separator: ",").ifEmpty("-"),
            ].joined(separator: "\t"))
        }
        lines.append("")
        lines.append((["bundle"] + JobEnd.fleetEnds.compactMap(\.contractName) + ["inFlight", "state"]).joined(separator: "\t"))
        var totals = FleetView()
        for instance in report.instances { totals.received(instance, at: now) }
        for (bundleID, bundle) in totals.totals(now: now).sorted(by: { $0.key < $1.key }) {
            let state = [bundle.held ? "HELD" : nil, report.paused.contains(bundleID) ? "PAUSED" : nil].compactMap { $0 }
            lines.append(([bundleID] + JobEnd.fleetEnds.map { String(bundle.count($0)) } + [String(bundle.inFlight), state.joined(separator: ",").ifEmpty("running")]).joined(separator: "\t"))
        }
        lines.append("")
        lines.append("instances: \(report.instances.count); paused: \(report.paused.isEmpty ? "none" : report.paused.joined(separator: ", "))")
        return lines.joined(separator: "\n")
    }
}

/// `apns-worker pause --bundle B` and `resume`: one command type for both.
protocol PauseChoice: Sendable {
    static var paused: Bool { get }
}

enum PauseBundle: PauseChoice { static var paused: Bool { true } }
enum ResumeBundle: PauseChoice { static var paused: Bool { false } }

struct PauseCommand<Choice: PauseChoice>: AsyncParsableCommand {
    static var configuration: CommandConfiguration {
        Choice.paused
            ? CommandConfiguration(
                commandName: "pause",
                abstract: "Stop every instance consuming a bundle's work queue (kept on the broker: restarts stay paused). Jobs wait in the broker.")
            : CommandConfiguration(commandName: "resume", abstract: "Let every instance consume a paused bundle's work queue again.")
    }

    @OptionGroup var broker: BrokerOptions

    @Option(help: "The bundle ID.")
    var bundle: String

    func validate() throws {
        guard FleetTopology.isPausable(bundle) else {
            throw ValidationError("--bundle: \"\(bundle)\" is not a bundle ID (letters, digits, '.', '-', '_'; at most 200 bytes)")
        }
    }

    func run() async throws {
        let logger = broker.logger("apns-worker.\(Choice.paused ? "pause" : "resume")")
        let amqp = try broker.orDefaultConfiguration().amqpConfiguration(connectionName: "apns-worker \(Choice.paused ? "pause" : "resume")")
        try await AMQPConnection.withConnection(configuration: amqp, logger: logger) { connection in
            if Choice.paused {
                try await FleetControl.pause(bundle, on: connection)
            } else {
                try await FleetControl.resume(bundle, on: connection)
            }
        }
        print(Choice.paused
            ? "\(bundle): paused on every instance (within one heartbeat interval); its jobs wait in the broker"
            : "\(bundle): resumed on every instance (within one heartbeat interval)")
    }
}

extension BrokerOptions {
    /// Without `--config` and `--url`, the worker's own configuration file when it exists, as
    /// `run` and the dead/retry commands read it.
    func orDefaultConfiguration() -> BrokerOptions {
        var options = self
        if configPath == nil, url == nil, FileManager.default.fileExists(atPath: BrokerOptions.defaultConfigPath) {
            options.configPath = BrokerOptions.defaultConfigPath
        }
        return options
    }
}

extension String {
    func ifEmpty(_ replacement: String) -> String { isEmpty ? replacement : self }
}
