// A re-consume (`consume(replacing:prefetch:maxBodySize:oversizedDeadLetter:)`) with settings
// other than the replaced consumer's, against the shared test broker: the new ones are in force.
import AMQPClient
import Foundation
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable))
struct ReconsumeSettingsTests {
    /// The first consumer drops bodies over 8 bytes and copies nothing; its replacement keeps
    /// bodies up to 64 bytes and copies larger ones to a dead queue. Published after the
    /// replacement started: a 32-byte body comes whole, a 100-byte one is copied and comes
    /// marked. (The driver used to start the replacement with the first consumer's settings.)
    @Test func aReplacementTakesTheBodyLimitAndDeadLetterRouteItsCallerPassed() async throws {
        let broker = try TestBroker.require()
        try await withConnection(try configuration(broker, name: uniqueName("reconsume-settings"))) { connection in
            let queue = uniqueName("reconsume-settings"), dead = uniqueName("reconsume-settings.dead")
            for name in [queue, dead] {
                try await connection.declareQueue(QueueDeclaration(name: name, arguments: ["x-queue-type": .string("quorum")]))
            }
            let first = try await connection.consume(queue: queue, prefetch: 4, maxBodySize: 8, oversizedDeadLetter: nil)
            let second = try await connection.consume(
                replacing: first, prefetch: 16, maxBodySize: 64,
                oversizedDeadLetter: { properties, _ in AMQPOutboundMessage(exchange: "", routingKey: dead, body: [], properties: properties) })
            let within = [UInt8](repeating: 0x61, count: 32), over = [UInt8](repeating: 0x62, count: 100)
            for (id, body) in [("within", within), ("over", over)] {
                var properties = AMQPProperties.persistentJSON
                properties.messageID = id
                try await connection.publish(AMQPOutboundMessage(exchange: "", routingKey: queue, body: body, properties: properties))
            }
            let iterator = second.makeAsyncIterator()
            let received = try await withTimeout(.seconds(60), "both deliveries") { [iterator] in
                var stream = iterator
                var received: [String: AMQPDeliveredMessage] = [:]
                while received.count < 2, let delivery = try await stream.next() {
                    received[delivery.message.properties.messageID ?? ""] = delivery.message
                    await connection.ack(delivery)
                }
                return received
            }
            let whole = try #require(received["within"])
            #expect(whole.body == within && whole.oversizedBodySize == nil, "32 bytes are within the replacement's 64")
            let copied = try #require(received["over"])
            #expect(copied.body.isEmpty && copied.oversizedBodySize == 100)
            #expect(copied.oversizedBodyDeadLettered, "copied by the replacement's route")
            var copy: AMQPDelivery?
            try await eventually(.seconds(30), "the copy in the dead queue") {
                copy = try await connection.get(queue: dead)
                return copy != nil
            }
            #expect(copy?.message.body == over)
            if let copy { await connection.ack(copy) }
            await second.cancel()
            for name in [queue, dead] { try await connection.deleteQueue(name) }
        }
    }
}
