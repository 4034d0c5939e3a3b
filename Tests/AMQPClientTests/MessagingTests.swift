// Publishing with confirms, consuming, settling, returns, header round-trips and consumer
// cancellation against the shared test broker.
import AMQPClient
import APNSModel
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable))
struct MessagingTests {
    @Test func publishConsumeAckNackReject() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("settle")
            try await connection.declareQueue(classicQueue(queue))
            for text in ["one", "two", "three"] { try await connection.publish(message(text, to: queue)) }
            #expect(try await connection.inspectQueue(queue).messageCount == 3)

            let consumer = try await connection.consume(queue: queue, prefetch: 10)
            var iterator = consumer.makeAsyncIterator()
            let first = try #require(try await iterator.next())
            let second = try #require(try await iterator.next())
            let third = try #require(try await iterator.next())
            #expect([first.text, second.text, third.text] == ["one", "two", "three"])
            #expect(!first.message.redelivered)
            #expect(first.message.routingKey == queue && first.message.properties.deliveryMode == 2)

            #expect(await connection.ack(first) == .settled)
            #expect(await connection.nack(second, requeue: true) == .settled)
            let again = try #require(try await iterator.next())
            #expect(again.text == "two" && again.message.redelivered)
            #expect(await connection.reject(third, requeue: false) == .settled)
            #expect(await connection.ack(again) == .settled)

            try await eventually(.seconds(30), "queue drained") {
                let info = try await connection.inspectQueue(queue)
                return info.messageCount == 0 && info.consumerCount == 1
            }
            await consumer.cancel()
            #expect(try await iterator.next() == nil, "a cancelled consumer ends")
            #expect(try await connection.inspectQueue(queue).consumerCount == 0)
            try await connection.deleteQueue(queue)
        }
    }

    /// Deliveries the broker sends between our basic.cancel and its cancel-ok reach a consumer
    /// whose sequence has ended. They must go back to the queue at once, not sit unacked on the
    /// open channel until the connection closes (a held bundle's jobs stuck until a restart).
    @Test func deliveriesRacingACancelGoBackToTheQueue() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("cancel-race")
            try await connection.declareQueue(classicQueue(queue))
            let total = 3000
            for i in 0..<total { try await connection.publish(message("m\(i)", to: queue)) }
            var acked = 0
            for round in 1...5 {
                let consumer = try await connection.consume(queue: queue, prefetch: 100)
                var iterator = consumer.makeAsyncIterator()
                // Acking keeps the broker sending, so deliveries are in flight when we cancel.
                for _ in 0..<200 {
                    let delivery = try #require(try await iterator.next())
                    #expect(await connection.ack(delivery) == .settled)
                    acked += 1
                }
                await consumer.cancel()
                while let leftover = try await iterator.next() {
                    #expect(await connection.nack(leftover, requeue: true) == .settled)
                }
                let expected = total - acked
                try await eventually(.seconds(30), "round \(round): \(expected) ready with the connection still open") {
                    try await connection.inspectQueue(queue).messageCount == UInt32(expected)
                }
            }
            try await connection.deleteQueue(queue)
        }
    }

    /// A publisher's sentinel timestamp (UInt64.max seconds) decodes to a date past UInt64's
    /// range; passing such a message on (a requeue, a dead letter) must not trap.
    /// A message taken with `basic.get` (a held bundle's probe) stays taken while an RPC the
    /// broker refuses goes by: a channel that closes hands its unacked deliveries back to the
    /// queue, and the ack after it finds its channel gone. Was: both on the control channel, so a
    /// passive declare of a queue that does not exist (a fleet pause check, every heartbeat)
    /// brought the probe's job back beside the copy it had published: sent twice (CI).
    @Test func aMessageTakenWithGetStaysTakenWhenAnRPCIsRefused() async throws {
        try await takenWithGetStaysTaken(named: "get-beside-rpc") { connection in
            await #expect(throws: AMQPError.self) { try await connection.inspectQueue(uniqueName("no-such-queue")) }
        }
    }

    /// The same with the refusal on the get channel itself: a get of a queue that does not exist
    /// (a held bundle's probe, its queue deleted) while another get's message is out (another
    /// held bundle's probe, a key-scope hold holds several). Was: the 404 closed the get channel,
    /// the message came back to its queue and its ack was `.stale`.
    @Test func aMessageTakenWithGetStaysTakenWhenAnotherGetIsRefused() async throws {
        try await takenWithGetStaysTaken(named: "get-beside-get") { connection in
            let missing = uniqueName("no-such-queue")
            do {
                _ = try await connection.get(queue: missing)
                Issue.record("a get of a queue that does not exist succeeded")
            } catch let error as AMQPError {
                #expect(error.code == .channelClosed && error.replyCode == 404 && error.queue == missing)
            }
        }
    }

    /// Takes a message with `basic.get`, runs `refusal` (something the broker refuses), then acks
    /// it: the ack applies, the message does not come back, and the get channel takes the next.
    private func takenWithGetStaysTaken(named name: String, _ refusal: (AMQPConnection) async throws -> Void) async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName(name)
            try await connection.declareQueue(classicQueue(queue))
            try await connection.publish(message("probe", to: queue))
            let taken = try #require(try await connection.get(queue: queue))
            try await refusal(connection)
            #expect(connection.ackNow(taken) == .settled)
            try await eventually(.seconds(30), "the ack applied") {
                let info = try await connection.inspectQueue(queue)
                return info.messageCount == 0
            }
            #expect(try await connection.get(queue: queue) == nil, "the message did not come back")
            try await connection.publish(message("next", to: queue))
            let next = try #require(try await connection.get(queue: queue), "the get channel still takes messages")
            #expect(next.text == "next" && !next.message.redelivered)
            #expect(connection.ackNow(next) == .settled)
            try await connection.deleteQueue(queue)
        }
    }

    /// `basic.get` keeps a body within its limit and not one over it (it read any body whole: one
    /// large message in a held bundle's queue, and its probe took that much memory), and keeps
    /// the header table's bytes as a consumer's delivery does; a consumer on the same connection
    /// gets every message of its own meanwhile (the get reads their frames and hands them on).
    @Test func getKeepsABodyWithinItsLimitAndNotOneOverIt() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("get-limit")
            let busy = uniqueName("get-beside-consumer")
            try await connection.declareQueue(classicQueue(queue))
            try await connection.declareQueue(classicQueue(busy))
            let large = 300 * 1024
            let headers: AMQPProperties = AMQPProperties(contentType: "application/json", headers: ["x-k": .string("v")], deliveryMode: 2)
            for n in 0..<20 {
                try await connection.publish(
                    AMQPOutboundMessage(exchange: "", routingKey: queue, body: [UInt8](repeating: 0x78, count: large), properties: headers))
                try await connection.publish(message("small \(n)", to: queue, properties: headers))
            }
            let total = 2_000
            for n in 0..<total { try await connection.publish(message("busy \(n)", to: busy)) }
            let consumer = try await connection.consume(queue: busy, prefetch: 50)
            let received = Task {
                var count = 0
                for try await delivery in consumer {
                    connection.ackNow(delivery)
                    count += 1
                    if count == total { break }
                }
                return count
            }
            for n in 0..<20 {
                let big = try #require(try await connection.get(queue: queue, maxBodySize: 64 * 1024))
                #expect(big.message.body.isEmpty && big.message.oversizedBodySize == UInt64(large))
                #expect(big.message.properties.receivedHeaderTable != nil && big.message.properties.headers?["x-k"] == .string("v"))
                #expect(connection.ackNow(big) == .settled)
                let small = try #require(try await connection.get(queue: queue, maxBodySize: 64 * 1024))
                #expect(small.text == "small \(n)" && small.message.oversizedBodySize == nil)
                #expect(small.message.properties.receivedHeaderTable != nil)
                #expect(connection.ackNow(small) == .settled)
            }
            #expect(try await connection.get(queue: queue) == nil)
            #expect(try await received.value == total, "every message of the consumer's queue reached it")
            await consumer.cancel()
            try await connection.deleteQueue(queue)
            try await connection.deleteQueue(busy)
        }
    }

    @Test func anOutOfRangeTimestampSurvivesBeingPassedOn() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("timestamp")
            try await connection.declareQueue(classicQueue(queue))
            var properties = AMQPProperties.persistentJSON
            properties.timestamp = Date(timeIntervalSince1970: 1e30)
            try await connection.publish(message("far", to: queue, properties: properties))
            for _ in 0..<2 {
                let got = try #require(try await connection.get(queue: queue))
                let seconds = try #require(got.message.properties.timestamp).timeIntervalSince1970
                #expect(seconds >= 1.8e19, "UInt64.max seconds, not wrapped")
                try await connection.publish(message("far", to: queue, properties: got.message.properties))
                #expect(await connection.ack(got) == .settled)
            }
            try await connection.deleteQueue(queue)
        }
    }

    /// While a consumer has deliveries unsettled, the connection's thread sleeps no longer than
    /// an ack's batch delay and is not woken for each ack. Those acks must still reach the
    /// broker: with a prefetch of 16, the 17th delivery comes only after the first ack arrived,
    /// and so on, so a stuck ack stops the flow. Acks come alone and in small groups, with
    /// pauses long enough for the thread to sleep between them, and the last ones after the
    /// flow has ended.
    @Test func acksTheThreadIsNotWokenForStillReachTheBroker() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("quiet-acks")
            try await connection.declareQueue(classicQueue(queue))
            let count = 40
            for index in 1...count { try await connection.publish(message("\(index)", to: queue)) }
            let consumer = try await connection.consume(queue: queue, prefetch: 16)
            let received = try await withTimeout(.seconds(60), "every delivery, each after earlier acks") {
                var iterator = consumer.makeAsyncIterator()
                var texts: [String] = []
                while texts.count < count, let delivery = try await iterator.next() {
                    texts.append(delivery.text)
                    if texts.count % 3 == 0 { try await Task.sleep(for: .milliseconds(15)) }
                    #expect(await connection.ack(delivery) == .settled)
                }
                return texts
            }
            #expect(received == (1...count).map { "\($0)" })
            try await eventually(.seconds(30), "no delivery left unacknowledged") {
                let listing = try await broker.ctl("list_queues", "--quiet", "--no-table-headers", "name", "messages_unacknowledged")
                return listing.split(separator: "\n").contains { $0.split(whereSeparator: \.isWhitespace) == [Substring(queue), "0"] }
            }
            await consumer.cancel()
            try await connection.deleteQueue(queue)
        }
    }

    @Test func manyPipelinedConfirmedPublishes() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("confirms")
            try await connection.declareQueue(QueueDeclaration(name: queue, arguments: ["x-queue-type": .string("quorum")]))
            let count = 2000
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<count { group.addTask { try await connection.publish(message("m\(i)", to: queue)) } }
                try await group.waitForAll()
            }
            #expect(try await connection.inspectQueue(queue).messageCount == UInt32(count))
            try await connection.deleteQueue(queue)
        }
    }

    @Test func unroutableMandatoryPublishFailsAndTheChannelStaysUsable() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let exchange = uniqueName("nowhere")
            try await connection.declareExchange(ExchangeDeclaration(name: exchange, kind: .direct))
            let queue = uniqueName("routable")
            try await connection.declareQueue(classicQueue(queue))
            do {
                try await connection.publish(AMQPOutboundMessage(exchange: exchange, routingKey: "nobody", body: Array("x".utf8), properties: .persistentJSON))
                Issue.record("an unroutable mandatory publish must fail")
            } catch let error as AMQPError {
                #expect(error.code == .publishReturned)
                #expect(error.replyCode == 312 && error.replyText == "NO_ROUTE")
                #expect(error.exchange == exchange)
            }
            // Not mandatory: the broker drops it and confirms.
            try await connection.publish(AMQPOutboundMessage(exchange: exchange, routingKey: "nobody", body: [1], properties: .persistentJSON, mandatory: false))
            // A missing exchange closes the publishing channel (404); the client reopens it.
            do {
                try await connection.publish(AMQPOutboundMessage(exchange: uniqueName("missing"), routingKey: "k", body: [1], properties: .persistentJSON))
                Issue.record("publishing to a missing exchange must fail")
            } catch let error as AMQPError {
                #expect(error.code == .channelClosed && error.replyCode == 404)
            }
            try await connection.publish(message("still works", to: queue))
            #expect(try await connection.inspectQueue(queue).messageCount == 1)
            try await connection.deleteQueue(queue)
            try await connection.deleteExchange(exchange)
        }
    }

    @Test func propertiesAndHeadersRoundTrip() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("headers")
            try await connection.declareQueue(classicQueue(queue))
            let headers: AMQPTable = [
                "bool": .bool(true),
                "int8": .int8(-8),
                "int16": .int16(-1600),
                "int32": .int32(320_000),
                "int64": .int64(-6_400_000_000),
                "float": .float(1.5),
                "double": .double(-2.25),
                "decimal": .decimal(scale: 2, value: 12345),
                "string": .string("héllo"),
                "bytes": .bytes([0, 255, 7, 128]),
                "timestamp": .timestamp(Date(timeIntervalSince1970: 1_700_000_000)),
                "table": .table(["nested": .table(["deep": .int32(1)]), "list": .array([.string("a"), .int64(2)])]),
                "array": .array([.int32(1), .string("two"), .table(["k": .bool(false)]), .array([])]),
                "void": .void,
                JobHeaders.attempt: .int32(3),
            ]
            let properties = AMQPProperties(
                contentType: "application/json", contentEncoding: "identity", headers: headers, deliveryMode: 2,
                priority: 5, correlationID: "corr-1", replyTo: "reply.queue", expiration: "600000",
                messageID: "6c2b0d43-8a9f-4b1a-9a59-1c1f6b0a7e11", timestamp: Date(timeIntervalSince1970: 1_700_000_123),
                type: "job", userID: "guest", appID: "apns-worker-tests")
            try await connection.publish(message("{}", to: queue, properties: properties))

            let consumer = try await connection.consume(queue: queue, prefetch: 1)
            var iterator = consumer.makeAsyncIterator()
            let delivery = try #require(try await iterator.next())
            #expect(delivery.message.properties == properties)
            #expect(delivery.message.properties.headers?["table"] == headers["table"])
            await connection.ack(delivery)
            await consumer.cancel()

            // basic.get decodes the same way, for the operator CLI.
            try await connection.publish(message("{}", to: queue, properties: properties))
            let got = try await connection.get(queue: queue)
            #expect(got?.message.properties == properties)
            if let got { #expect(await connection.ack(got) == .settled) }
            #expect(try await connection.get(queue: queue) == nil)
            try await connection.deleteQueue(queue)
        }
    }

    @Test func deadLetteredMessagesCarryXDeath() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let target = uniqueName("dlx-target")
            let source = uniqueName("dlx-source")
            try await connection.declareQueue(classicQueue(target))
            try await connection.declareQueue(QueueDeclaration(name: source, arguments: [
                "x-queue-type": .string("classic"), "x-dead-letter-exchange": .string(""), "x-dead-letter-routing-key": .string(target),
            ]))
            try await connection.publish(message("dead", to: source))
            let consumer = try await connection.consume(queue: source, prefetch: 1)
            var iterator = consumer.makeAsyncIterator()
            let delivery = try #require(try await iterator.next())
            await connection.reject(delivery, requeue: false)
            await consumer.cancel()

            var dead: AMQPDelivery?
            try await eventually(.seconds(30), "dead-lettered message") {
                dead = try await connection.get(queue: target)
                return dead != nil
            }
            let headers = try #require(dead?.message.properties.headers)
            guard case .array(let deaths)? = headers["x-death"], case .table(let death)? = deaths.first else {
                Issue.record("x-death missing: \(headers)")
                return
            }
            #expect(death["queue"]?.stringValue == source)
            #expect(death["reason"]?.stringValue == "rejected")
            #expect(death["count"]?.intValue == 1)
            if case .timestamp = death["time"] {} else { Issue.record("x-death time is not a timestamp") }
            try await connection.deleteQueue(source)
            try await connection.deleteQueue(target)
        }
    }

    @Test func deletingTheQueueCancelsTheConsumer() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("cancelled")
            try await connection.declareQueue(classicQueue(queue))
            let consumer = try await connection.consume(queue: queue, prefetch: 5)
            try await connection.deleteQueue(queue)
            do {
                for try await _ in consumer {}
                Issue.record("the stream must end with consumerCancelled")
            } catch let error as AMQPError {
                #expect(error.code == .consumerCancelled)
                #expect(error.queue == queue)
            }
            // The connection is unaffected.
            try await connection.declareQueue(classicQueue(queue))
            try await connection.publish(message("after", to: queue))
            try await connection.deleteQueue(queue)
            #expect(connection.state == .connected)
        }
    }

    @Test func consumingAMissingQueueFails() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            do {
                _ = try await connection.consume(queue: uniqueName("absent"))
                Issue.record("expected NOT_FOUND")
            } catch let error as AMQPError {
                #expect(error.code == .channelClosed && error.replyCode == 404)
            }
            #expect(connection.state == .connected)
        }
    }

    @Test func severalConsumersOnOneConnection() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queues = [uniqueName("multi-a"), uniqueName("multi-b")]
            for queue in queues {
                try await connection.declareQueue(classicQueue(queue))
                for i in 0..<20 { try await connection.publish(message("\(queue)-\(i)", to: queue)) }
            }
            let counts = try await withThrowingTaskGroup(of: Int.self) { group in
                for queue in queues {
                    let consumer = try await connection.consume(queue: queue, prefetch: 3)
                    group.addTask {
                        var received = 0
                        for try await delivery in consumer {
                            #expect(delivery.text.hasPrefix(queue))
                            await connection.ack(delivery)
                            received += 1
                            if received == 20 { break }
                        }
                        await consumer.cancel()
                        return received
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(counts == [20, 20])
            for queue in queues { try await connection.deleteQueue(queue) }
        }
    }
}
