import AMQPClient
import APNSModel
import APNSTopology
import Foundation
import Logging
import QueueConsumer
import ServiceClock

/// Where one message of `apns.registry` or `apns.groups` goes: the registry's counterpart of
/// the pipeline's `OutcomeRouter.Route`, in the same words (ack, dead). Not that type: this
/// module sits below the worker's, a route here carries no `JobEnd` (a group job's ends are
/// counted per notification it fans out, `RegistryRecorder`), and two routes are ones a bundle's
/// job never takes, both a requeue.
public enum RegistryRoute: Sendable {
    /// Done: ack.
    case ack
    /// Malformed: to the dead queue with section 4's headers, body unchanged, then ack.
    case dead(JobError)
    /// The registry failed: requeue the message and hold the consumers (contract §6).
    case requeueAndHold(any Error)
    /// A publish was not confirmed: requeue the message; the registry is fine.
    case requeue(String)
}

/// The work of one of §6's queue consumers (`apns.registry`, `apns.groups`) on the generic
/// `QueueConsumer`: every message is handed to `handle` in the consumer's settle runner (bounded
/// by the prefetch), and its route taken. A registry failure holds the consumer
/// (`ConsumerStateMachine`, one hold breaker) and its sibling with it (`sibling`: the two share
/// PostgreSQL); while held, the probe is a ping of PostgreSQL once per probe interval, and the
/// consumer consumes again when one succeeds.
struct RegistryConsumer<Broker: MessageConsuming & ConfirmedPublishing>: ConsumerWork {
    let queue: String
    let deadQueue: String
    let prefetch: UInt16
    /// Contract §4's largest message; a larger one is never assembled and is rejected in `process`.
    let maxBodySize: Int
    let broker: Broker
    let store: RegistryStore
    let logger: Logger
    /// The times written into dead letters.
    let clock: any ConsumerClock
    /// The other registry consumer, held along with this one.
    let sibling: QueueConsumer<RegistryConsumer>?
    let handle: @Sendable (AMQPDelivery) async -> RegistryRoute

    var oversizedDeadLetter: AMQPOversizedDeadLetter? {
        let clock = clock
        return DeadOnArrival.oversizedDeadLetter(queue: deadQueue, maxBodyBytes: maxBodySize) { clock.wallTime }
    }

    /// The registry keeps no queue latency.
    func publishTime(of delivery: AMQPDelivery) -> Date? { nil }

    /// A held registry consumer's probe: PostgreSQL answers or not; no message is taken.
    func probe() async throws -> ConsumerProbe {
        do {
            try await store.ping()
            return .healthy
        } catch {
            logger.debug("registry probe failed", metadata: ["amqp.queue": "\(queue)", "error": "\(error)"])
            return .nothing
        }
    }

    /// The handler awaits PostgreSQL: the message is worked in the consumer's settle runner.
    func start(_ delivery: AMQPDelivery, probe: Bool, on consumer: QueueConsumer<RegistryConsumer>) {
        consumer.settleLater { await self.settle(delivery, probe: probe, on: consumer) }
    }

    /// One message worked and settled, its breaker signal told to `consumer` (and a hold to the sibling).
    func settle(_ delivery: AMQPDelivery, probe: Bool, on consumer: QueueConsumer<RegistryConsumer>) async {
        let settled = await process(delivery, isHeld: { consumer.isHeld }) { signal in
            if case .hold(let reason, _) = signal { sibling?.holdAlongside(reason: reason) }
            // Any message handled is proof PostgreSQL answers again.
            return consumer.answered(signal, endsAHold: true) == .settle
        }
        if settled { consumer.settled(probe: probe) }
    }

    /// One error line when a hold starts (the sibling, held along, says nothing), one notice when
    /// a probe ends it.
    static func announce(_ news: QueueConsumer<RegistryConsumer>.Machine.News, queue: String, logger: Logger) {
        switch news {
        case .none:
            break
        case .held(let reason, _):
            logger.error(
                "device registry (PostgreSQL) unavailable: registration and group consumers HELD, messages stay in the broker until a probe succeeds",
                metadata: ["amqp.queue": "\(queue)", "error": "\(reason)"])
        case .resumed(let heldFor):
            logger.notice(
                "registry reachable again: its consumer resumes", metadata: ["amqp.queue": "\(queue)", "held.seconds": "\(heldFor.components.seconds)"])
        case .abandoned(let messages):
            logger.warning(
                "messages still in flight at the deadline are handed back to the broker", metadata: ["amqp.queue": "\(queue)", "messages": "\(messages)"])
        case .brokerFailed(let reason):
            logger.error(
                "broker unavailable: this consumer is started again every probe interval until it is back",
                metadata: ["amqp.queue": "\(queue)", "amqp.error": "\(reason)"])
        case .brokerRecovered:
            logger.notice("broker reachable again: consuming", metadata: ["amqp.queue": "\(queue)"])
        }
    }

    /// Works one message and settles it. `judged` tells the consumer's machine the breaker signal
    /// before the settle and answers whether to settle at all (not after the shutdown deadline);
    /// returns false when it did not. `isHeld`: a hold came meanwhile.
    func process(_ delivery: AMQPDelivery, isHeld: () -> Bool, judged: (BreakerSignal) -> Bool) async -> Bool {
        switch DeadOnArrival(delivery.message) {
        case .bodyTooLarge(let size, let copied):
            if copied {
                // Copied to the dead queue as it arrived, confirmed (docs/decisions.md).
                logger.warning("message too large: dead-lettered as it arrived", metadata: ["amqp.queue": "\(queue)", "amqp.body_size": "\(size)"])
                await broker.ack(delivery)
            } else {
                // The copy could not be made and the body was not kept: the broker dead-letters it, unchanged.
                logger.warning(
                    "message too large: rejected for the broker to dead-letter", metadata: ["amqp.queue": "\(queue)", "amqp.body_size": "\(size)"])
                await broker.nack(delivery, requeue: false)
            }
            return true
        case .headerTableDropped(let error):
            await deadLetter(delivery, error: error)
            return true
        case nil:
            break
        }
        // Once held, messages still in flight go back untouched.
        if isHeld() {
            await broker.nack(delivery, requeue: true)
            return true
        }
        switch await handle(delivery) {
        case .ack:
            guard judged(.healthy) else { return false }
            await broker.ack(delivery)
        case .dead(let error):
            await deadLetter(delivery, error: error)
        case .requeueAndHold(let error):
            guard judged(.hold(reason: String(String(reflecting: error).prefix(300)), status: 0)) else { return false }
            await broker.nack(delivery, requeue: true)
        case .requeue(let why):
            logger.warning("message requeued", metadata: ["amqp.queue": "\(queue)", "why": "\(why)"])
            await broker.nack(delivery, requeue: true)
        }
        return true
    }

    private func deadLetter(_ delivery: AMQPDelivery, error: JobError) async {
        logger.warning("malformed message dead-lettered", metadata: ["amqp.queue": "\(queue)", "job.error": "\(error)"])
        do {
            try await broker.publish(
                DeadOnArrival.deadLetter(
                    properties: delivery.message.properties, body: delivery.message.body, queue: deadQueue, error: error, now: clock.wallTime))
            await broker.ack(delivery)
        } catch {
            logger.warning("could not dead-letter; the broker will deliver it again", metadata: ["amqp.error": "\(error)"])
            await broker.nack(delivery, requeue: true)
        }
    }
}
