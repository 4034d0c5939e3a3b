/// APNSWorkerClient: what the sync server needs to publish to apns-worker. Typed messages
/// (`NotificationJob`, `BroadcastJob`, `GroupNotificationJob`, `Registration`), validated by the worker's own
/// parsers before anything is sent, so a malformed job fails at the producer with the message the
/// worker would have dead-lettered it with; and a publisher on a connection of its own whose every
/// publish returns once RabbitMQ has confirmed it. Each message carries the caller's trace
/// context (W3C `traceparent`/`tracestate` headers) when the caller has a span in its
/// `ServiceContext` and a tracer is bootstrapped (`InstrumentationSystem`, e.g. with swift-otel):
/// the worker continues that trace. While the connection is being re-established, a publish
/// waits for it up to its deadline (`publishDeadline`, 30 s by default) instead of failing. The
/// sync server reads the feedback it must act on with `feedback(queue:bundleIDs:)`. Every
/// failure is an `APNSWorkerClientError`. Depends on `AMQPClient` (librabbitmq), the pure
/// `APNSModel`, `APNSRegistryMessages` and `APNSTopologyNames`, and swift-distributed-tracing only.
///
///     let client = try await APNSWorkerClient.connect(url: "amqps://sync:secret@rabbitmq:5671/%2f")
///     defer { Task { await client.close() } }
///     try await client.publish(NotificationJob(bundleID: "com.example.app", token: token, payload: .alert("Hello")))
///     try await client.publish(GroupNotificationJob(group: "account-42", payload: .contentAvailable, except: [token]))
///     try await client.publish(Registration.register(bundleID: "com.example.app", token: token, group: "account-42"))
import AMQPClient
import APNSModel
import APNSTopologyNames
import Foundation
import Logging
import Tracing

/// A publisher to apns-worker's exchanges on one AMQP connection (reconnecting by itself).
public final class APNSWorkerClient: Sendable {
    let connection: AMQPConnection
    /// Injects the caller's trace context; nil: the process-global `InstrumentationSystem`'s.
    private let instrument: (any Instrument)?
    let logger: Logger
    /// How long a publish waits for a lost connection to come back before it fails with
    /// `connectionUnavailable` (each publish can say otherwise).
    public let publishDeadline: Duration

    /// Opens the client's own connection. `urls` are tried in order on failure (failover list).
    /// `instrument` injects the trace context into each message (default: the one bootstrapped
    /// in `InstrumentationSystem`; without one, nothing is added).
    public static func connect(
        urls: [String], connectionName: String = "apns-worker client", logger: Logger = Logger(label: "apns-worker-client"),
        instrument: (any Instrument)? = nil, publishDeadline: Duration = .seconds(30)
    ) async throws -> APNSWorkerClient {
        try await connect(
            configuration: try AMQPConfiguration(urlStrings: urls, connectionName: connectionName), logger: logger, instrument: instrument,
            publishDeadline: publishDeadline)
    }

    /// Opens the client's own connection with every `AMQPConfiguration` setting (TLS, heartbeat).
    /// Throws `AMQPError` when no broker of the list accepts the first connection.
    public static func connect(
        configuration: AMQPConfiguration, logger: Logger = Logger(label: "apns-worker-client"), instrument: (any Instrument)? = nil,
        publishDeadline: Duration = .seconds(30)
    ) async throws -> APNSWorkerClient {
        APNSWorkerClient(
            connection: try await AMQPConnection.connect(configuration: configuration, logger: logger), instrument: instrument,
            logger: logger, publishDeadline: publishDeadline)
    }

    public static func connect(
        url: String, logger: Logger = Logger(label: "apns-worker-client"), publishDeadline: Duration = .seconds(30)
    ) async throws -> APNSWorkerClient {
        try await connect(urls: [url], logger: logger, publishDeadline: publishDeadline)
    }

    private init(connection: AMQPConnection, instrument: (any Instrument)?, logger: Logger, publishDeadline: Duration) {
        self.connection = connection
        self.instrument = instrument
        self.logger = logger
        self.publishDeadline = publishDeadline
    }

    /// Whether the connection is up now (it re-establishes itself after a loss).
    public var isConnected: Bool { connection.state == .connected }

    /// Validates `job`, publishes it to `apns.jobs` with its bundle ID as routing key, and returns
    /// once the broker confirmed it. Throws `invalidMessage` or `payloadTooLarge` before sending
    /// anything when the worker would dead-letter the job; `connectionUnavailable` when the
    /// connection stays down past `deadline` (default `publishDeadline`).
    public func publish(_ job: NotificationJob, deadline: Duration? = nil) async throws(APNSWorkerClientError) {
        try job.validate()
        try await send(exchange: TopologyNames.jobsExchange, routingKey: job.bundleID, body: job.body(), id: job.id, deadline: deadline)
    }

    /// Validates and publishes a broadcast job to `apns.jobs` with its bundle ID as routing key
    /// (confirmed).
    public func publish(_ job: BroadcastJob, deadline: Duration? = nil) async throws(APNSWorkerClientError) {
        try job.validate()
        try await send(exchange: TopologyNames.jobsExchange, routingKey: job.bundleID, body: job.body(), id: job.id, deadline: deadline)
    }

    /// Validates and publishes a group job to `apns.groups` (confirmed).
    public func publish(_ job: GroupNotificationJob, deadline: Duration? = nil) async throws(APNSWorkerClientError) {
        try job.validate()
        try await send(exchange: TopologyNames.groups, routingKey: "", body: job.body(), id: job.id, deadline: deadline)
    }

    /// Validates and publishes a registration change to `apns.registry` (confirmed).
    public func publish(_ registration: Registration, deadline: Duration? = nil) async throws(APNSWorkerClientError) {
        try registration.validate()
        try await send(exchange: TopologyNames.registry, routingKey: "", body: registration.body(), id: nil, deadline: deadline)
    }

    /// The feedback events for `bundleIDs` (nil: every bundle) from a durable queue of the sync
    /// server's own named `queue` (bound to `apns.feedback`, declared with `<queue>.dead` for
    /// malformed messages, and declared again after every reconnect). Use one name per sync
    /// server fleet: the instances share the events (competing consumers), and events published
    /// while none runs wait in the queue. Each event is acked by `FeedbackDelivery.ack()`
    /// (see `FeedbackEvents` for the at-least-once rules).
    public func feedback(queue: String, bundleIDs: [String]? = nil, prefetch: UInt16 = 100) async throws(APNSWorkerClientError) -> FeedbackEvents {
        let keys = bundleIDs ?? ["#"]
        let plan = TopologyPlan(
            exchanges: [
                // As the worker declares it (APNSTopology), so either may start first.
                ExchangeDeclaration(
                    name: TopologyNames.feedbackExchange, kind: .topic,
                    arguments: ["alternate-exchange": .string(TopologyNames.feedbackUnrouted)])
            ],
            queues: [QueueDeclaration(name: queue), QueueDeclaration(name: FeedbackEvents.deadQueue(of: queue))],
            bindings: keys.map { BindingDeclaration(queue: queue, exchange: TopologyNames.feedbackExchange, routingKey: $0) })
        do {
            try await connection.declare(plan)
            let consumer = try await connection.consume(queue: queue, prefetch: prefetch, maxBodySize: FeedbackEvent.maxBodyBytes)
            return FeedbackEvents(queue: queue, consumer: consumer, connection: connection, logger: logger)
        } catch let error as AMQPError {
            throw APNSWorkerClientError.classify(error) ?? .connectionUnavailable(waited: .zero, lastError: error.description)
        } catch {
            throw .broker("\(error)")
        }
    }

    public func close() async {
        await connection.close()
    }

    /// Publishes and waits for the confirm. While the connection is down (`notConnected`,
    /// `connectionLost`), it tries again, pausing 50 ms doubling to 1 s, until `deadline`. A
    /// publish lost with its connection may have reached the broker: the retry can publish the
    /// job twice, which at-least-once delivery allows (the job keeps its id).
    private func send(exchange: String, routingKey: String, body: [UInt8], id: UUID?, deadline: Duration?) async throws(APNSWorkerClientError) {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = id?.uuidString.lowercased()
        properties.timestamp = Date()
        if let context = ServiceContext.current {
            var headers: AMQPTable = [:]
            (instrument ?? InstrumentationSystem.instrument).inject(context, into: &headers, using: AMQPHeaderInjector())
            if !headers.isEmpty { properties.headers = headers }
        }
        let message = AMQPOutboundMessage(exchange: exchange, routingKey: routingKey, body: body, properties: properties)
        let limit = deadline ?? publishDeadline
        let clock = ContinuousClock()
        let start = clock.now
        var pause = Duration.milliseconds(50)
        while true {
            let lastError: AMQPError
            do {
                try await connection.publish(message)
                return
            } catch let error as AMQPError {
                if let final = APNSWorkerClientError.classify(error) { throw final }
                lastError = error
            } catch {
                throw .broker("\(error)")
            }
            let waited = start.duration(to: clock.now)
            guard waited < limit, !Task.isCancelled else { throw .connectionUnavailable(waited: waited, lastError: lastError.description) }
            logger.debug("publish waits for the connection", metadata: ["amqp.error": "\(lastError)", "apns.waited": "\(waited)"])
            try? await Task.sleep(for: min(pause, limit - waited))
            pause = min(pause * 2, .seconds(1))
        }
    }
}

/// The swift-distributed-tracing `Injector` the client hands to `Instrument.inject`: it writes
/// whatever the instrument injects (W3C `traceparent`, `tracestate` for swift-otel) as AMQP text
/// headers, where the worker reads them (`JobEnvelope.traceContext`). The values are the
/// instrument's; the client writes no trace header of its own.
struct AMQPHeaderInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout AMQPTable) {
        carrier[key] = .string(value)
    }
}
