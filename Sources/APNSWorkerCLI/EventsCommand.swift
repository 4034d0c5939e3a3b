/// `apns-worker events --bundle B [--end E] [--json]` (contract §8): a bundle's delivery events,
/// live, one line each, for a person watching a rollout. Its own exclusive queue, bound to
/// `apns.events`, which the broker removes when the command's connection ends. Read with the
/// client's strict reader, the one a sync server links.
import AMQPClient
@_spi(APNSWorker) import APNSJSON
import APNSModel
import APNSTopologyNames
// Scoped: APNSModel's DeliveryEvent is the worker's writer; the module's name is also its client
// class's, so `APNSWorkerClient.DeliveryEvent` would not name this one.
import struct APNSWorkerClient.DeliveryEvent
import struct APNSWorkerClient.DeliveryEvents
import struct APNSWorkerClient.MalformedFeedback
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
            let consumer = try await connection.consume(queue: queue, prefetch: 100, maxBodySize: DeliveryEvents.maxBodyBytes)
            // The header goes where it cannot mix with the JSON lines a script reads.
            let header = "following the delivery events of \(bundle)\(end.map { " (\($0) only)" } ?? ""); interrupt to stop\n"
            (json ? FileHandle.standardError : FileHandle.standardOutput).write(Data(header.utf8))
            // Written at once, line by line, whatever stdout is (a pipe or a file buffers `print`).
            for try await delivery in consumer {
                let (line, onStandardError) = Self.shown(delivery.message, json: json)
                (onStandardError ? FileHandle.standardError : FileHandle.standardOutput).write(Data((line + "\n").utf8))
                connection.ackNow(delivery)
            }
        }
    }

    /// One message as shown: an event as its `line`, or with `--json` its body as the worker wrote
    /// it (compacted, so that it is one line whatever whitespace a publisher put in). A message the
    /// client's reader refuses (someone else published it) is one line saying why, without its
    /// content; with `--json` on standard error, so that standard output stays events a script
    /// can read.
    static func shown(_ message: AMQPDeliveredMessage, json: Bool) -> (line: String, onStandardError: Bool) {
        let event: DeliveryEvent
        do throws(MalformedFeedback) {
            if let size = message.oversizedBodySize {
                throw MalformedFeedback("the body is \(size) bytes; at most \(DeliveryEvents.maxBodyBytes) are accepted")
            }
            event = try DeliveryEvent.parseOrThrow(message.body)
        } catch {
            let size = message.oversizedBodySize ?? UInt64(message.body.count)
            return ("refused a message on apns.events that is no delivery event (\(size) bytes): \(error.message)", json)
        }
        guard json else { return (event.line, false) }
        return (String(decoding: message.body.withUnsafeBufferPointer(JSONReader.compact), as: UTF8.self), false)
    }
}
