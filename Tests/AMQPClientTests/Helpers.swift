// Shared helpers of the broker tests: connecting, timeouts, management API look-ups.
import AMQPClient
import APNSModel
import Foundation
import Logging
import TestSupport

struct TimeoutError: Error, CustomStringConvertible {
    var what: String
    var description: String { "timed out: \(what)" }
}

/// Runs `body`, failing with `TimeoutError` after `limit`.
func withTimeout<T: Sendable>(_ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw TimeoutError(what: what)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// Polls `condition` every 100 ms until it holds or `limit` of polling passes (`waitUntil`).
func eventually(
    _ limit: Duration, _ what: String, isolation: isolated (any Actor)? = #isolation, _ condition: () async throws -> Bool
) async throws {
    do {
        try await waitUntil(what, timeout: limit, condition)
    } catch is TestSupportError {
        throw TimeoutError(what: what)
    }
}

func testLogger(_ label: String = "amqp-test") -> Logger {
    var logger = Logger(label: label)
    logger.logLevel = .warning
    return logger
}

func configuration(
    _ broker: BrokerCoordinates, name: String = uniqueName("test"), heartbeat: Duration = .seconds(30),
    backoff: AMQPBackoff = AMQPBackoff(initial: .milliseconds(200), maximum: .seconds(1))
) throws -> AMQPConfiguration {
    var configuration = AMQPConfiguration(urls: [try AMQPURL(string: broker.amqpURL)], connectionName: name)
    configuration.heartbeat = heartbeat
    configuration.backoff = backoff
    return configuration
}

/// A connection to `broker` for the duration of `body`, closed afterwards whatever happens.
func withConnection<T>(
    _ configuration: AMQPConfiguration, isolation: isolated (any Actor)? = #isolation,
    _ body: (AMQPConnection) async throws -> T
) async throws -> T {
    try await AMQPConnection.withConnection(configuration: configuration, logger: testLogger(), body)
}

func message(_ text: String, to queue: String, properties: AMQPProperties = .persistentJSON) -> AMQPOutboundMessage {
    AMQPOutboundMessage(exchange: "", routingKey: queue, body: Array(text.utf8), properties: properties, mandatory: true)
}

extension AMQPDelivery {
    var text: String { String(decoding: message.body, as: UTF8.self) }
}

extension BrokerCoordinates {
    func object(_ path: String) async throws -> [String: Any] {
        guard let object = try await managementJSON(path) as? [String: Any] else { throw TestSupportError("\(path) is not an object") }
        return object
    }

    func array(_ path: String) async throws -> [[String: Any]] {
        guard let array = try await managementJSON(path) as? [[String: Any]] else { throw TestSupportError("\(path) is not an array") }
        return array
    }

    /// Closes the broker side of our connection named `connectionName` (management API DELETE):
    /// a connection loss that disturbs nobody else on the shared broker.
    func forceClose(connectionName: String) async throws {
        let connections = try await array("/connections")
        guard let entry = connections.first(where: { ($0["client_properties"] as? [String: Any])?["connection_name"] as? String == connectionName }),
            let name = entry["name"] as? String
        else { throw TestSupportError("connection \(connectionName) not listed") }
        let encoded = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? name
        let result = try await runProcess("/usr/bin/curl", ["-fsS", "-u", "guest:guest", "-X", "DELETE", managementURL + "/api/connections/" + encoded])
        guard result.status == 0 else { throw TestSupportError("DELETE connection failed: \(result.stderr)") }
    }
}

/// A classic queue named `name`, its type named outright (a vhost can set another default).
func classicQueue(_ name: String) -> QueueDeclaration {
    QueueDeclaration(name: name, arguments: ["x-queue-type": .string("classic")])
}
