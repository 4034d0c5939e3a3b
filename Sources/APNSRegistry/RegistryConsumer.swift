import AMQPClient
import APNSModel
import APNSTopology
import Foundation
import Logging
import ServiceLifecycle

/// What a handler decided for one message of `apns.registry` or `apns.groups`.
public enum RegistryDisposition: Sendable {
    /// Done: ack.
    case ack
    /// Malformed: to the dead queue with section 4's headers, body unchanged, then ack.
    case dead(JobError)
    /// The registry failed: requeue the message and hold the consumers (contract §6).
    case registryFailed(any Error)
    /// A publish was not confirmed: requeue the message; the registry is fine.
    case requeue(String)
}

/// Consumes one of §6's queues with bounded concurrency (the prefetch), hands every message to
/// `handle`, and carries out its disposition. While `health` is held it stops consuming, probes
/// the registry once per probe interval, and consumes again when a probe succeeds.
struct RegistryConsumer<Broker: MessageConsuming & ConfirmedPublishing>: Sendable {
    let queue: String
    let deadQueue: String
    let prefetch: UInt16
    /// Contract §4's largest message; a larger one is never assembled and is rejected in `process`.
    let maxBodySize: Int
    let broker: Broker
    let store: RegistryStore
    let health: RegistryHealth
    let logger: Logger
    let handle: @Sendable (AMQPDelivery) async -> RegistryDisposition

    func run() async throws {
        logger.info("registry consumer started", metadata: ["amqp.queue": "\(queue)"])
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            if health.isHeld {
                await probe()
            } else {
                try await consumeUntilHeldOrShutdown()
            }
        }
        logger.info("registry consumer stopped", metadata: ["amqp.queue": "\(queue)"])
    }

    private func probe() async {
        guard health.probeDue() == .probe else {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(200)) }
            return
        }
        do {
            try await store.ping()
            if let heldFor = health.succeeded() {
                logger.notice(
                    "registry reachable again: registration and group consumers resume",
                    metadata: ["held.seconds": "\(heldFor.components.seconds)"])
            }
        } catch {
            logger.debug("registry probe failed", metadata: ["error": "\(error)"])
        }
    }

    private func consumeUntilHeldOrShutdown() async throws {
        let consumer: Broker.Consumer
        do {
            let (deadQueue, maxBodySize) = (deadQueue, maxBodySize)
            consumer = try await broker.consume(
                queue: queue, prefetch: prefetch, maxBodySize: maxBodySize,
                oversizedDeadLetter: { properties, size in
                    let error = JobError(kind: .malformedJob, field: "body", message: "\(size) bytes, over the \(maxBodySize) allowed")
                    return Self.deadLetter(properties: properties, body: [], queue: deadQueue, error: error, now: Date())
                })
        } catch {
            logger.warning("cannot consume; trying again", metadata: ["amqp.queue": "\(queue)", "error": "\(error)"])
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(1)) }
            return
        }
        let limit = max(Int(prefetch), 1)
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                var running = 0
                var iterator = consumer.makeAsyncIterator()
                while !health.isHeld, !Task.isShuttingDownGracefully, let delivery = try? await iterator.next() {
                    if health.isHeld || Task.isShuttingDownGracefully {
                        await broker.nack(delivery, requeue: true)
                        break
                    }
                    if running >= limit, await group.next() != nil { running -= 1 }
                    running += 1
                    group.addTask {
                        await self.process(delivery)
                        // Held (by this message or the other consumer): stop the delivery stream.
                        if self.health.isHeld { await consumer.cancel() }
                    }
                }
                await consumer.cancel()
                while let leftover = try? await iterator.next() {
                    await broker.nack(leftover, requeue: true)
                }
                await group.waitForAll()
            }
        } onGracefulShutdown: {
            Task { await consumer.cancel() }
        }
    }

    func process(_ delivery: AMQPDelivery) async {
        if let size = delivery.message.oversizedBodySize {
            if delivery.message.oversizedBodyDeadLettered {
                // Copied to the dead queue as it arrived, confirmed (docs/decisions.md).
                logger.warning("message too large: dead-lettered as it arrived", metadata: ["amqp.queue": "\(queue)", "amqp.body_size": "\(size)"])
                await broker.ack(delivery)
            } else {
                // The copy could not be made and the body was not kept: the broker dead-letters it, unchanged.
                logger.warning(
                    "message too large: rejected for the broker to dead-letter", metadata: ["amqp.queue": "\(queue)", "amqp.body_size": "\(size)"])
                await broker.nack(delivery, requeue: false)
            }
            return
        }
        if let size = delivery.message.oversizedPropertiesSize {
            await deadLetter(delivery, error: JobError.oversizedProperties(size, limit: AMQPProperties.maximumEncodedSize))
            return
        }
        if delivery.message.headersNestedTooDeep {
            await deadLetter(delivery, error: JobError.nestedHeaders(limit: AMQPProperties.maximumHeaderDepth))
            return
        }
        // Once held, messages still in flight go back untouched.
        if health.isHeld {
            await broker.nack(delivery, requeue: true)
            return
        }
        switch await handle(delivery) {
        case .ack:
            await broker.ack(delivery)
        case .dead(let error):
            await deadLetter(delivery, error: error)
        case .registryFailed(let error):
            if health.failed() == .holdAndAlert {
                logger.error(
                    "device registry (PostgreSQL) unavailable: registration and group consumers HELD, messages stay in the broker until a probe succeeds",
                    metadata: ["error": "\(String(reflecting: error).prefix(300))"])
            }
            await broker.nack(delivery, requeue: true)
        case .requeue(let why):
            logger.warning("message requeued", metadata: ["amqp.queue": "\(queue)", "why": "\(why)"])
            await broker.nack(delivery, requeue: true)
        }
    }

    private func deadLetter(_ delivery: AMQPDelivery, error: JobError) async {
        logger.warning("malformed message dead-lettered", metadata: ["amqp.queue": "\(queue)", "job.error": "\(error)"])
        do {
            try await broker.publish(Self.deadLetter(delivery.message, queue: deadQueue, error: error, now: Date()))
            await broker.ack(delivery)
        } catch {
            logger.warning("could not dead-letter; the broker will deliver it again", metadata: ["amqp.error": "\(error)"])
            await broker.nack(delivery, requeue: true)
        }
    }

    /// Section 4's dead letter: body and properties unchanged (less `user_id` and `expiration`,
    /// `AMQPProperties.republished`), `x-apns-*` headers added.
    static func deadLetter(_ message: AMQPDeliveredMessage, queue: String, error: JobError, now: Date) -> AMQPOutboundMessage {
        deadLetter(properties: message.properties, body: message.body, queue: queue, error: error, now: now)
    }

    static func deadLetter(properties received: AMQPProperties, body: [UInt8], queue: String, error: JobError, now: Date) -> AMQPOutboundMessage {
        var properties = received.republished()
        var envelope = JobEnvelope(properties.headers)
        envelope.forward()
        envelope.record(
            JobEnvelope.Failure(
                reason: JobError.Kind.malformedJob.rawValue, status: 0, attempts: 0, failedAt: now, error: error.description))
        properties.headers = envelope.amqpHeaders
        return AMQPOutboundMessage(exchange: "", routingKey: queue, body: body, properties: properties)
    }
}
