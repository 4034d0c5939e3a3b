/// `apns-worker events --bundle B [--end E] [--json]` (contract §8): a bundle's delivery events,
/// live, one line each, for a person watching a rollout. Its own exclusive queue, bound to
/// `apns.events`, which the broker removes when the command's connection ends.
import AMQPClient
import APNSModel
import APNSTopologyNames
import ArgumentParser
import Foundation
import Logging

struct EventsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "Follow a bundle's delivery events live (apns.events), one line each, until interrupted.",
        discussion: "Only the jobs whose sender asked for events have any ([apns \"…\"] events, or the job's events field).")

    @OptionGroup var broker: BrokerOptions

    @Option(help: "The bundle ID whose events to follow.")
    var bundle: String

    @Option(help: "Only this end: delivered, invalidToken, dead or retried.")
    var end: String?

    @Flag(help: "Each event's JSON body as the worker wrote it, one per line.")
    var json = false

    func validate() throws {
        guard UntrustedText.isBundleID(bundle) else { throw ValidationError("--bundle: \"\(bundle)\" is not a bundle ID") }
        if let end, DeliveryEvent.End(rawValue: end) == nil {
            let ends = DeliveryEvent.End.allCases.map(\.rawValue).joined(separator: ", ")
            throw ValidationError("--end: \"\(end)\" is not an end (\(ends))")
        }
    }

    func run() async throws {
        let broker = self.broker.orDefaultConfiguration()
        let logger = broker.logger("apns-worker.events")
        let amqp = try broker.amqpConfiguration(connectionName: "apns-worker events")
        let queue = "apns.events.watch.\(UUID().uuidString.lowercased())"
        try await AMQPConnection.withConnection(configuration: amqp, logger: logger) { connection in
            // A plan, so that a reconnect declares the queue and its binding again.
            try await connection.declare(
                TopologyPlan(
                    exchanges: [ExchangeDeclaration(name: TopologyNames.eventsExchange, kind: .topic)],
                    queues: [QueueDeclaration(name: queue, exclusive: true)],
                    bindings: [BindingDeclaration(queue: queue, exchange: TopologyNames.eventsExchange, routingKey: "\(bundle).\(end ?? "*")")]))
            let consumer = try await connection.consume(queue: queue, prefetch: 100, maxBodySize: Self.maxBodySize)
            // The header goes where it cannot mix with the JSON lines a script reads.
            let header = "following the delivery events of \(bundle)\(end.map { " (\($0) only)" } ?? ""); interrupt to stop\n"
            (json ? FileHandle.standardError : FileHandle.standardOutput).write(Data(header.utf8))
            // Written at once, line by line, whatever stdout is (a pipe or a file buffers `print`).
            let out = FileHandle.standardOutput
            for try await delivery in consumer {
                out.write(Data((Self.line(delivery.message.body, json: json) + "\n").utf8))
                connection.ackNow(delivery)
            }
        }
    }

    /// An event is a few hundred bytes; anything far larger is not one of the worker's.
    static let maxBodySize = 64 * 1024

    /// One event as printed: its body (`--json`), or `DeliveryEvent.line`; a body that is no event
    /// (someone else published it) says so, without its content.
    static func line(_ body: [UInt8], json: Bool) -> String {
        guard let event = try? JSONDecoder().decode(DeliveryEvent.self, from: Data(body)) else {
            return json ? #"{"unreadable":\#(body.count)}"# : "an unreadable message on apns.events (\(body.count) bytes)"
        }
        return json ? String(decoding: event.jsonBytes(), as: UTF8.self) : event.line
    }
}
