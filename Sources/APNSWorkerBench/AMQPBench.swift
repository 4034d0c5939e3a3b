// `apns-worker-bench amqp`: throughput of AMQPClient against a real broker, beside the same
// work done by a minimal C loop over librabbitmq (`amqp-c-loop`) in the same run.
import AMQPClient
import APNSModel
import APNSTopologyNames
import ArgumentParser
import Foundation
import Logging

struct AMQPBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "amqp",
        abstract: "Confirmed-publish and consume-and-ack throughput of AMQPClient vs. a C loop over librabbitmq."
    )

    @Option(help: "Broker URL (default: $APNS_TEST_AMQP_URL or amqp://guest:guest@127.0.0.1:5682/%2f).")
    var url: String = ProcessInfo.processInfo.environment["APNS_TEST_AMQP_URL"] ?? "amqp://guest:guest@127.0.0.1:5682/%2f"

    @Option(help: "Messages per phase.")
    var messages: Int = 50_000

    @Option(help: "Body size in bytes.")
    var size: Int = 256

    @Option(help: "Consumer prefetch (basic.qos).")
    var prefetch: Int = 500

    @Option(help: "Publishes in flight (unconfirmed) at once.")
    var window: Int = 500

    @Option(name: .customLong("queue-type"), help: "classic or quorum.")
    var queueType: String = "classic"

    @Option(name: .customLong("c-loop"), help: "Path of amqp-c-loop (default: next to this executable).")
    var cLoop: String?

    func run() async throws {
        guard let type = QueueType(rawValue: queueType) else { throw ValidationError("--queue-type must be classic or quorum") }
        let loopPath = cLoop ?? Self.siblingExecutable("amqp-c-loop")
        guard FileManager.default.isExecutableFile(atPath: loopPath) else {
            throw ValidationError("amqp-c-loop not found at \(loopPath) (build it: swift build -c release --product amqp-c-loop)")
        }
        var logger = Logger(label: "apns-worker-bench.amqp")
        logger.logLevel = .warning
        var configuration = try AMQPConfiguration(urlStrings: [url], connectionName: "apns-worker-bench")
        configuration.heartbeat = .seconds(30)
        let body = [UInt8](repeating: UInt8(ascii: "x"), count: size)
        let suffix = UUID().uuidString.prefix(8).lowercased()
        let swiftQueue = "bench.amqp.swift.\(suffix)", cQueue = "bench.amqp.c.\(suffix)"
        let arguments: [String: TopologyArgument] = ["x-queue-type": .string(type.rawValue)]

        print("AMQP benchmark: \(messages) messages of \(size) bytes, \(type.rawValue) queue, prefetch \(prefetch), \(window) publishes in flight")
        try await AMQPConnection.withConnection(configuration: configuration, logger: logger) { connection in
            for queue in [swiftQueue, cQueue] { try await connection.declareQueue(QueueDeclaration(name: queue, arguments: arguments)) }

            let swiftPublish = try await publishAll(connection, queue: swiftQueue, body: body)
            let cPublish = try runLoop(loopPath, ["publish", url, cQueue, String(messages), String(size), String(window)])
            let swiftConsume = try await consumeAll(connection, queue: swiftQueue)
            let cConsume = try runLoop(loopPath, ["consume", url, cQueue, String(messages), String(prefetch), "0"])

            func line(_ name: String, _ swift: Double, _ c: Double) -> String {
                let label = name.padding(toLength: 24, withPad: " ", startingAt: 0)
                return "\(label) AMQPClient \(Int(swift)) msg/s   C loop \(Int(c)) msg/s   ratio \(String(format: "%.2f", swift / c))"
            }
            print(line("confirmed publish", swiftPublish, cPublish))
            print(line("consume + ack", swiftConsume, cConsume))
            for queue in [swiftQueue, cQueue] { try await connection.deleteQueue(queue) }
        }
    }

    /// Publishes `messages` confirmed messages with `window` in flight; returns msg/s.
    private func publishAll(_ connection: AMQPConnection, queue: String, body: [UInt8]) async throws -> Double {
        let message = AMQPOutboundMessage(exchange: "", routingKey: queue, body: body, properties: .persistentJSON, mandatory: true)
        let total = messages
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            var sent = 0
            while sent < min(window, total) {
                group.addTask { try await connection.publish(message) }
                sent += 1
            }
            while try await group.next() != nil {
                if sent < total {
                    group.addTask { try await connection.publish(message) }
                    sent += 1
                }
            }
        }
        return Double(total) / Self.seconds(since: start)
    }

    /// Consumes and acks `messages` messages; returns msg/s.
    private func consumeAll(_ connection: AMQPConnection, queue: String) async throws -> Double {
        let consumer = try await connection.consume(queue: queue, prefetch: UInt16(clamping: prefetch))
        var received = 0
        let start = ContinuousClock.now
        for try await delivery in consumer {
            await connection.ack(delivery)
            received += 1
            if received == messages { break }
        }
        let rate = Double(received) / Self.seconds(since: start)
        await consumer.cancel()
        return rate
    }

    /// Runs amqp-c-loop and reads the rate from its `… = <rate> msg/s` line.
    private func runLoop(_ path: String, _ arguments: [String]) throws -> Double {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0, let equals = text.range(of: "= "),
            let rate = Double(text[equals.upperBound...].prefix { $0.isNumber || $0 == "." })
        else { throw ValidationError("amqp-c-loop \(arguments.first ?? "") failed (\(process.terminationStatus)): \(text)") }
        return rate
    }

    private static func seconds(since start: ContinuousClock.Instant) -> Double {
        let elapsed = start.duration(to: .now)
        return elapsed.timeInterval
    }

    private static func siblingExecutable(_ name: String) -> String {
        let own = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        return own.deletingLastPathComponent().appendingPathComponent(name).path
    }
}
