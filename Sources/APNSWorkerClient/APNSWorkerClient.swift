/// APNSWorkerClient: what the sync server needs to publish to apns-worker. Typed messages
/// (`NotificationJob`, `BroadcastJob`, `GroupNotificationJob`, `Registration`), validated by the worker's own
/// parsers before anything is sent, so a malformed job fails at the producer with the message the
/// worker would have dead-lettered it with; and a publisher on a connection of its own whose every
/// publish returns once RabbitMQ has confirmed it. Each message carries the caller's trace
/// context (W3C `traceparent`/`tracestate` headers) when the caller has a span in its
/// `ServiceContext` and a tracer is bootstrapped (`InstrumentationSystem`, e.g. with swift-otel):
/// the worker continues that trace. Depends on `AMQPClient`, `APNSCore` and
/// swift-distributed-tracing only.
///
///     let client = try await APNSWorkerClient.connect(url: "amqps://sync:secret@rabbitmq:5671/%2f")
///     defer { Task { await client.close() } }
///     try await client.publish(NotificationJob(bundleID: "com.example.app", token: token, payload: .alert("Hello")))
///     try await client.publish(GroupNotificationJob(group: "account-42", payload: .contentAvailable, except: [token]))
///     try await client.publish(Registration.register(bundleID: "com.example.app", token: token, group: "account-42"))
import AMQPClient
import APNSCore
import Foundation
import Logging
import Tracing

/// Why a publish did not happen.
public enum APNSWorkerClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The worker would refuse the message: its field and the worker's own message.
    case invalidMessage(JobError)

    public var description: String {
        switch self {
        case .invalidMessage(let error): "\(error.field): \(error.message)"
        }
    }
}

/// A publisher to apns-worker's exchanges on one AMQP connection (reconnecting by itself).
public final class APNSWorkerClient: Sendable {
    private let connection: AMQPConnection
    /// Injects the caller's trace context; nil: the process-global `InstrumentationSystem`'s.
    private let instrument: (any Instrument)?

    /// Opens the client's own connection. `urls` are tried in order on failure (failover list).
    /// `instrument` injects the trace context into each message (default: the one bootstrapped
    /// in `InstrumentationSystem`; without one, nothing is added).
    public static func connect(
        urls: [String], connectionName: String = "apns-worker client", logger: Logger = Logger(label: "apns-worker-client"),
        instrument: (any Instrument)? = nil
    ) async throws -> APNSWorkerClient {
        try await connect(
            configuration: try AMQPConfiguration(urlStrings: urls, connectionName: connectionName), logger: logger, instrument: instrument)
    }

    /// Opens the client's own connection with every `AMQPConfiguration` setting (TLS, heartbeat).
    public static func connect(
        configuration: AMQPConfiguration, logger: Logger = Logger(label: "apns-worker-client"), instrument: (any Instrument)? = nil
    ) async throws -> APNSWorkerClient {
        APNSWorkerClient(connection: try await AMQPConnection.connect(configuration: configuration, logger: logger), instrument: instrument)
    }

    public static func connect(url: String, logger: Logger = Logger(label: "apns-worker-client")) async throws -> APNSWorkerClient {
        try await connect(urls: [url], logger: logger)
    }

    private init(connection: AMQPConnection, instrument: (any Instrument)?) {
        self.connection = connection
        self.instrument = instrument
    }

    /// Validates `job`, publishes it to `apns.jobs` with its bundle ID as routing key, and returns
    /// once the broker confirmed it. Throws `APNSWorkerClientError.invalidMessage` before sending
    /// anything when the worker would dead-letter the job.
    public func publish(_ job: NotificationJob) async throws {
        try job.validate()
        try await send(exchange: TopologyNames.jobsExchange, routingKey: job.bundleID, body: job.body(), id: job.id)
    }

    /// Validates and publishes a broadcast job to `apns.jobs` with its bundle ID as routing key
    /// (confirmed).
    public func publish(_ job: BroadcastJob) async throws {
        try job.validate()
        try await send(exchange: TopologyNames.jobsExchange, routingKey: job.bundleID, body: job.body(), id: job.id)
    }

    /// Validates and publishes a group job to `apns.groups` (confirmed).
    public func publish(_ job: GroupNotificationJob) async throws {
        try job.validate()
        try await send(exchange: TopologyNames.groups, routingKey: "", body: job.body(), id: job.id)
    }

    /// Validates and publishes a registration change to `apns.registry` (confirmed).
    public func publish(_ registration: Registration) async throws {
        try registration.validate()
        try await send(exchange: TopologyNames.registry, routingKey: "", body: registration.body(), id: nil)
    }

    public func close() async {
        await connection.close()
    }

    private func send(exchange: String, routingKey: String, body: [UInt8], id: UUID?) async throws {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = id?.uuidString.lowercased()
        properties.timestamp = Date()
        if let context = ServiceContext.current {
            var headers: AMQPTable = [:]
            (instrument ?? InstrumentationSystem.instrument).inject(context, into: &headers, using: AMQPHeaderInjector())
            if !headers.isEmpty { properties.headers = headers }
        }
        try await connection.publish(AMQPOutboundMessage(exchange: exchange, routingKey: routingKey, body: body, properties: properties))
    }
}

/// Writes what an instrument injects (W3C `traceparent`, `tracestate`) as AMQP text headers,
/// where the worker reads them (`JobEnvelope.traceContext`).
struct AMQPHeaderInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout AMQPTable) {
        carrier[key] = .string(value)
    }
}
