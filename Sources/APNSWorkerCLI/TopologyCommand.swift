/// `apns-worker topology`: declares the broker topology of a configuration (contract §1), as the
/// worker does at start-up, and prints every exchange, queue and binding with message counts.
import AMQPClient
import APNSConfig
import APNSTopology
import APNSTopologyNames
import ArgumentParser
import Foundation
import Logging

struct TopologyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "topology",
        abstract: "Declare the broker topology of a configuration and show it with message counts.",
        discussion: "Declaring is idempotent: it creates what is missing and changes nothing that exists. --dry-run only prints the plan.")

    @OptionGroup var broker: BrokerOptions

    @Option(help: "Bundle ID to declare queues for (repeatable; instead of --config's bundles).")
    var bundle: [String] = []

    @Option(help: "quorum or classic (without --config; default quorum).")
    var queueType: String?

    @Flag(help: "Print what would be declared without connecting.")
    var dryRun = false

    @Flag(help: "Print a JSON object.")
    var json = false

    /// What `--json` prints; `messages` and `consumers` are absent with `--dry-run`.
    struct Report: Encodable {
        struct Exchange: Encodable { var name: String; var type: String; var arguments: [String: String] }
        struct Queue: Encodable { var name: String; var arguments: [String: String]; var messages: Int?; var consumers: Int? }
        struct Binding: Encodable { var exchange: String; var routingKey: String; var queue: String }
        var declared: Bool
        var exchanges: [Exchange]
        var queues: [Queue]
        var bindings: [Binding]
    }

    func run() async throws {
        let plan = try self.plan()
        var report = Report(
            declared: !dryRun,
            exchanges: plan.exchanges.map { .init(name: $0.name, type: $0.kind.rawValue, arguments: Self.text($0.arguments)) },
            queues: plan.queues.map { .init(name: $0.name, arguments: Self.text($0.arguments)) },
            bindings: plan.bindings.map { .init(exchange: $0.exchange, routingKey: $0.routingKey, queue: $0.queue) })
        if !dryRun {
            let amqp = try broker.amqpConfiguration(connectionName: "apns-worker topology")
            let planned = report
            let logger = broker.logger("apns-worker.topology")
            report = try await operatorCall {
                try await AMQPConnection.withConnection(configuration: amqp, logger: logger) { connection in
                    // As the worker does: a busy node refusing a quorum queue for a while
                    // (`541 … cluster_not_formed`) is waited out, said once; an interrupt stops it.
                    try await connection.declareWaitingForTheBroker(plan, logger: logger)
                    var counted = planned
                    for index in counted.queues.indices {
                        let info = try await connection.inspectQueue(counted.queues[index].name)
                        counted.queues[index].messages = Int(info.messageCount)
                        counted.queues[index].consumers = Int(info.consumerCount)
                    }
                    return counted
                }
            }
        }
        if json {
            printJSON(report)
        } else {
            print(Self.render(report), terminator: "")
        }
    }

    private func plan() throws -> TopologyPlan {
        if bundle.isEmpty, let path = broker.configPath {
            return try loadConfiguration(path, credentials: .skipFiles).topologyPlan
        }
        guard !bundle.isEmpty else { throw ValidationError("give --config or at least one --bundle") }
        let type: QueueType
        if let queueType {
            guard let parsed = QueueType(rawValue: queueType) else { throw ValidationError("--queue-type is quorum or classic") }
            type = parsed
        } else if let path = broker.configPath {
            type = try loadConfiguration(path, credentials: .skipFiles).amqp.queueType
        } else {
            type = .quorum
        }
        let delays = try broker.configPath.map { try loadConfiguration($0, credentials: .skipFiles).retry.delays } ?? RetrySettings().delays
        return TopologyPlan(bundleIDs: bundle, retryDelays: delays, queueType: type)
    }

    private static func text(_ arguments: [String: TopologyArgument]) -> [String: String] {
        arguments.mapValues { argument in
            switch argument {
            case .string(let s): return s
            case .int(let i): return String(i)
            }
        }
    }

    private static func arguments(_ arguments: [String: String]) -> String {
        arguments.keys.sorted().map { "\($0)=\(arguments[$0] ?? "")" }.joined(separator: " ")
    }

    static func render(_ report: Report) -> String {
        var out = report.declared ? "declared:\n" : "would declare (dry run):\n"
        out += "exchanges:\n"
        out += JobTable.aligned(report.exchanges.map { ["  \($0.name)", $0.type, arguments($0.arguments)] })
        out += "queues:\n"
        out += JobTable.aligned(report.queues.map { queue in
            var row = ["  \(queue.name)"]
            if let messages = queue.messages, let consumers = queue.consumers {
                row += ["\(messages) msg", "\(consumers) consumers"]
            }
            return row + [arguments(queue.arguments)]
        })
        out += "bindings:\n"
        out += JobTable.aligned(report.bindings.map { ["  \($0.exchange)", "--[\($0.routingKey)]-->", $0.queue] })
        return out
    }
}
