// The client's delivery events (contract §8) against the real test broker: the ends asked for,
// acked by the caller (an unacked one comes back), repeats dropped by message_id when asked,
// and what is no event skipped; the job's `events` field as the client writes it.
import AMQPClient
import APNSModel
import APNSTopologyNames
import APNSWorkerClient
import Foundation
import Logging
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"), .serialized)
struct DeliveryEventsClientTests {
    static var logger: Logger {
        var logger = Logger(label: "client-events-tests")
        logger.logLevel = .error
        return logger
    }

    /// Job ids as the worker writes them: canonical UUIDs (the client takes nothing else).
    static let jobs = (0...3).map { "5e2d0c8b-7e4b-4c8a-9a51-6c0e8c7b7d1\($0)" }

    /// An event as the worker writes it (`APNSModel`'s type; the client reads its own).
    static func event(bundle: String, job: String, end: APNSModel.DeliveryEvent.End, attempts: Int = 1) -> AMQPOutboundMessage {
        let event = APNSModel.DeliveryEvent(
            jobId: job, bundleId: bundle, end: end, reason: end == .delivered ? nil : "BadExpirationDate", status: end == .delivered ? 200 : 400,
            apnsId: nil, apnsUniqueId: nil, attempts: attempts, at: Date(), target: .device(DeviceToken(hex: "abcd")!), environment: .production,
            groupJobId: nil)
        var properties = AMQPProperties.persistentJSON
        properties.messageID = event.messageID
        return AMQPOutboundMessage(
            exchange: TopologyNames.eventsExchange, routingKey: event.routingKey, body: event.jsonBytes(), properties: properties, mandatory: false)
    }

    /// The next delivery, or a failure after `timeout` (the iterator is cancelled).
    static func next(_ events: DeliveryEvents, within timeout: Duration = .seconds(60)) async throws -> DeliveryEventDelivery {
        let waiting = Task {
            var iterator = events.makeAsyncIterator()
            return try await iterator.next()
        }
        let timer = Task {
            try await Task.sleep(for: timeout)
            waiting.cancel()
        }
        defer { timer.cancel() }
        guard let delivery = try? await waiting.value else { throw TestSupportError("no delivery event within \(timeout)") }
        return delivery
    }

    @Test func theEndsAskedForAckedByTheCallerRepeatsDroppedWhenAsked() async throws {
        let broker = try TestBroker.require()
        let bundle = uniqueName("com.example.events")
        let queue = uniqueName("sync-events")
        let client = try await APNSWorkerClient.connect(url: broker.amqpURL, logger: Self.logger)
        let events = try await client.events(queue: queue, bundleIDs: [bundle], ends: [.dead, .retried], dropRepeats: true)
        try await AMQPConnection.withConnection(
            configuration: try AMQPConfiguration(urlStrings: [broker.amqpURL], connectionName: "client-test-events"), logger: Self.logger
        ) { publisher in
            let dead = Self.event(bundle: bundle, job: Self.jobs[1], end: .dead)
            for message in [
                Self.event(bundle: bundle, job: Self.jobs[0], end: .delivered), dead, dead,
                AMQPOutboundMessage(
                    exchange: TopologyNames.eventsExchange, routingKey: "\(bundle).dead", body: Array("not an event".utf8),
                    properties: .persistentJSON, mandatory: false),
                Self.event(bundle: bundle, job: Self.jobs[2], end: .retried, attempts: 2),
                Self.event(bundle: uniqueName("com.example.other"), job: Self.jobs[3], end: .dead),
            ] {
                try await publisher.publishAgainAfterNacks(message)
            }
            let first = try await Self.next(events)
            #expect(first.event.jobID == Self.jobs[1] && first.event.end == .dead && first.event.reason == "BadExpirationDate")
            #expect(first.event.bundleID == bundle && first.event.status == 400 && first.event.target == .token("abcd"))
            #expect(first.messageID == "\(Self.jobs[1]).dead.1")
            #expect(first.ack())
            // Its repeat is skipped, and so is the message that is no event.
            let second = try await Self.next(events)
            #expect(second.event.jobID == Self.jobs[2] && second.event.end == .retried && second.event.attempts == 2)
            // Not acked: it comes back to the next consumer of the queue.
            await client.close()
            let again = try await APNSWorkerClient.connect(url: broker.amqpURL, logger: Self.logger)
            let more = try await again.events(queue: queue, bundleIDs: [bundle], ends: [.dead, .retried])
            let redelivered = try await Self.next(more)
            #expect(redelivered.event.jobID == Self.jobs[2] && redelivered.redelivered)
            #expect(redelivered.ack())
            await again.close()
            #expect(try await publisher.inspectQueue(queue).messageCount == 0, "the delivered event and the other bundle's were never bound")
            _ = try? await publisher.deleteQueue(queue)
        }
    }

    @Test func aJobsEventsFieldIsWrittenAndCheckedByTheWorkersParser() throws {
        let job = NotificationJob(
            bundleID: "com.example.app", token: String(repeating: "ab", count: 32), payload: .alert("Hi"), options: DeliveryOptions(events: .all))
        let body = String(decoding: job.body(), as: UTF8.self)
        #expect(body.contains(#""events":"all""#))
        let parsed = try JobParser.parse(
            body: job.body(), bundleID: "com.example.app", messageID: nil, defaultEnvironment: .production, transport: .http2
        ).get()
        #expect(parsed.events == .all)
    }
}
