// Names longer than an AMQP short string fail alone, before they reach the connection.
import AMQPClient
import Foundation
import Testing
import TestSupport

/// A name over 255 bytes used to reach librabbitmq, which could not encode the method and
/// dropped the connection ("invalid AMQP data") with every consumer and publish on it: a
/// forged fleet heartbeat's bundle key did that to `apns-worker fleet`. Each such command now
/// fails with `invalidName`, and the connection goes on.
@Suite(.enabled(if: TestBroker.isAvailable))
struct ShortStringNameTests {
    static let overlong = "apns.fleet.paused.forged." + String(repeating: "x", count: 240)

    @Test func everyCommandWithAnOverlongNameFailsAloneAndTheConnectionGoesOn() async throws {
        let broker = try TestBroker.require()
        let queue = uniqueName("shortstr")
        try await withConnection(configuration(broker)) { connection in
            try await connection.declareQueue(QueueDeclaration(name: queue, arguments: [:]))
            let consumer = try await connection.consume(queue: queue, prefetch: 10)
            let before = connection.connectionCount

            let attempts: [(String, @Sendable () async throws -> Void)] = [
                ("inspect", { _ = try await connection.inspectQueue(Self.overlong) }),
                ("declare", { _ = try await connection.declareQueue(QueueDeclaration(name: Self.overlong, arguments: [:])) }),
                ("plan", { try await connection.declare(TopologyPlan(exchanges: [], queues: [QueueDeclaration(name: Self.overlong, arguments: [:])], bindings: [])) }),
                ("bind", { try await connection.bind(BindingDeclaration(queue: queue, exchange: "amq.direct", routingKey: Self.overlong)) }),
                ("delete", { _ = try await connection.deleteQueue(Self.overlong) }),
                ("purge", { _ = try await connection.purgeQueue(Self.overlong) }),
                ("get", { _ = try await connection.get(queue: Self.overlong) }),
                ("consume", { _ = try await connection.consume(queue: Self.overlong, prefetch: 1) }),
                ("publish", {
                    try await connection.publish(
                        AMQPOutboundMessage(exchange: "", routingKey: Self.overlong, body: [1], properties: AMQPProperties(), mandatory: false))
                }),
            ]
            for (what, attempt) in attempts {
                await #expect(throws: AMQPError.self, "\(what)") { try await attempt() }
                do { try await attempt() } catch let error as AMQPError { #expect(error.code == .invalidName, "\(what): \(error)") }
            }

            // The same connection and its consumer still work: nothing was dropped.
            try await connection.publish(AMQPOutboundMessage(exchange: "", routingKey: queue, body: Array("after".utf8), properties: AMQPProperties()))
            var deliveries = consumer.makeAsyncIterator()
            let delivery = try #require(try await deliveries.next())
            #expect(delivery.message.body == Array("after".utf8))
            await connection.ack(delivery)
            #expect(connection.connectionCount == before, "no reconnect")
            await consumer.cancel()
            try await connection.deleteQueue(queue)
        }
    }

    @Test func aNameOfExactly255BytesStillGoesThrough() async throws {
        let broker = try TestBroker.require()
        let name = uniqueName("shortstr255")
        let queue = name + String(repeating: "q", count: 255 - name.utf8.count)
        try await withConnection(configuration(broker)) { connection in
            try await connection.declareQueue(QueueDeclaration(name: queue, arguments: [:]))
            #expect(try await connection.inspectQueue(queue).messageCount == 0)
            try await connection.deleteQueue(queue)
        }
    }
}
