import AMQPClient
import APNSOutcome
import Logging
import QueueConsumer
import Synchronization

/// The settles that publish: a route's own message (retry, dead letter, feedback), a delivery
/// event, or both. Those of jobs settled close together go to the broker as one batch
/// (`PublishBatcher`): one command to the AMQP owner thread, one resumption when the broker has
/// confirmed them all, then the jobs' acks through the connection's coalesced acks, with one
/// task a batch where each job took a task, a wake-up and a resumption of its own.
///
/// Each job's guarantees are its own: acked only once its messages are confirmed (a route's
/// message and its event share the batch's confirms); a route's message refused leaves the job
/// to the broker (nacked to be delivered again); an event refused never does, since delivering
/// the job again would send it to Apple again: it is published again until the broker takes
/// it. A batch still unconfirmed at the shutdown deadline leaves its jobs unacked.
extension BundlePipeline {
    /// A job whose settle publishes, with what its end needs.
    struct PublishingSettle: Sendable {
        var job: JobInFlight
        var route: OutcomeRouter.Route
        var message: AMQPOutboundMessage?
        var event: AMQPOutboundMessage?
        var answered: (Outcome, OutcomeRouter.JobContext)?
        var details: Logger.Metadata
    }

    /// The most jobs in one batch (two messages each at most).
    static var publishBatchLimit: Int { 256 }

    /// Adds the settle to the batch being gathered; the settle runner publishes it.
    func publishThenAck(_ settle: PublishingSettle) {
        switch publishing.withLock({ $0.add(settle) }) {
        case .gathered:
            break
        case .flushOnNextTurn:
            consumer.settleLater { await self.publishThenAck(batch: self.publishing.withLock { $0.take() }) }
        case .flush(let batch):
            consumer.settleLater { await self.publishThenAck(batch: batch) }
        }
    }

    /// One batch: its messages published as one, then each job acked (or nacked, or its event
    /// published again) and finished.
    func publishThenAck(batch: [PublishingSettle]) async {
        guard !batch.isEmpty else { return }
        var messages: [AMQPOutboundMessage] = []
        messages.reserveCapacity(batch.count * 2)
        for settle in batch {
            if let message = settle.message { messages.append(message) }
            if let event = settle.event { messages.append(event) }
        }
        let results = await broker.publish(messages)
        var next = results.startIndex
        var eventsRefused: [(settle: PublishingSettle, error: AMQPError)] = []
        for settle in batch {
            let messageError = settle.message == nil ? nil : results[next]
            if settle.message != nil { next += 1 }
            let eventError = settle.event == nil ? nil : results[next]
            if settle.event != nil { next += 1 }
            if let messageError, let message = settle.message {
                logger.warning(
                    "could not publish the job's outcome; the broker will deliver the job again",
                    metadata: ["amqp.error": "\(messageError)", "amqp.routing_key": "\(message.routingKey)"])
                await broker.nack(settle.job.delivery, requeue: true)
                finished(settle)
            } else if let eventError {
                eventsRefused.append((settle, eventError))
            } else {
                broker.ackNow(settle.job.delivery)
                finished(settle)
            }
        }
        guard let first = eventsRefused.first else { return }
        let refused = eventsRefused.map(\.settle)
        var taken = [Bool](repeating: false, count: refused.count)
        await publishUntilTaken(refused.map { $0.event! }, refusedFirst: first.error) { index in
            taken[index] = true
            broker.ackNow(refused[index].job.delivery)
            finished(refused[index])
        }
        // Cancelled at the shutdown deadline: these jobs stay unacked for the broker.
        for (index, settle) in refused.enumerated() where !taken[index] { finished(settle) }
    }

    /// Publishes `events` until the broker takes each, telling `taken` each one's index as it is
    /// taken; returns when all are, or when cancelled first (at the shutdown deadline).
    /// `refusedFirst`: the refusal of a first try made already, else they are tried at once.
    /// One warning for the first refusal, one notice once all are taken after refusals.
    func publishUntilTaken(_ events: [AMQPOutboundMessage], refusedFirst: AMQPError?, taken: (Int) -> Void) async {
        var waiting = Array(events.indices)
        var refusals = 0
        var delay = Duration.milliseconds(100)
        func refusedOnce(_ error: AMQPError, _ event: AMQPOutboundMessage) {
            if refusals == 0 {
                logger.warning(
                    "could not publish a delivery event; publishing it again, the job is not sent again",
                    metadata: ["amqp.error": "\(error)", "amqp.routing_key": "\(event.routingKey)", "events": "\(waiting.count)"])
            }
            refusals += 1
        }
        if let refusedFirst { refusedOnce(refusedFirst, events[0]) }
        var tryNow = refusedFirst == nil
        while !waiting.isEmpty {
            if !tryNow {
                do {
                    try await Task.sleep(for: delay)
                } catch {
                    return
                }
                delay = min(delay * 2, .seconds(5))
            }
            tryNow = false
            let results = await broker.publish(waiting.map { events[$0] })
            var still: [Int] = []
            var refusal: AMQPError?
            for (index, error) in zip(waiting, results) {
                if let error {
                    still.append(index)
                    refusal = refusal ?? error
                } else {
                    taken(index)
                }
            }
            waiting = still
            if let refusal { refusedOnce(refusal, events[still[0]]) }
        }
        if refusals > 0 {
            logger.notice(
                "delivery event published after refusals", metadata: ["amqp.routing_key": "\(events[0].routingKey)", "amqp.refusals": "\(refusals)"])
        }
    }

    private func finished(_ settle: PublishingSettle) {
        finished(settle.job, settle.route, answered: settle.answered, details: settle.details)
    }
}
