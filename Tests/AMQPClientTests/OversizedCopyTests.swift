// Copying a body over the consumer's limit to where it says, frame by frame as it arrives
// (`consume(…, oversizedDeadLetter:)`, contract §4), against the shared test broker.
import AMQPClient
import Foundation
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable))
struct OversizedCopyTests {
    /// Bodies just over the limit and of several MiB reach the copy's queue byte for byte with
    /// the copy's properties; the consumer gets each one marked, without its body, once the
    /// broker confirmed the copy. One whose copy is unroutable comes unmarked (the caller's
    /// fallback: reject, for the broker to dead-letter it). Small bodies pass untouched between them.
    @Test func oversizedBodiesAreCopiedAsTheyArriveAndHandedOverMarked() async throws {
        let broker = try TestBroker.require()
        try await withConnection(try configuration(broker, name: uniqueName("oversized-copy"))) { connection in
            let queue = uniqueName("oversized"), dead = uniqueName("oversized.dead")
            for name in [queue, dead] {
                try await connection.declareQueue(classicQueue(name))
            }
            let limit = 64 * 1024
            let bodies: [[UInt8]] = [
                Array("small".utf8),
                (0..<(limit + 1)).map { UInt8(truncatingIfNeeded: $0 &* 7) },
                (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13) },
                Array("unroutable".utf8) + [UInt8](repeating: 0x55, count: limit * 2),
                Array("small again".utf8),
            ]
            for (index, body) in bodies.enumerated() {
                var properties = AMQPProperties.persistentJSON
                properties.messageID = "m\(index)"
                properties.headers = ["n": .int32(Int32(index))]
                try await connection.publish(AMQPOutboundMessage(exchange: "", routingKey: queue, body: body, properties: properties))
            }
            let consumer = try await connection.consume(
                queue: queue, prefetch: 10, maxBodySize: limit,
                oversizedDeadLetter: { properties, size in
                    var copy = properties
                    copy.headers?["copied-size"] = .int64(Int64(size))
                    // The fourth goes nowhere: returned, so not copied.
                    let target = properties.messageID == "m3" ? uniqueName("nowhere") : dead
                    return AMQPOutboundMessage(exchange: "", routingKey: target, body: [], properties: copy)
                })
            let iterator = consumer.makeAsyncIterator()
            let deliveries = try await withTimeout(.seconds(120), "every delivery") { [iterator] in
                var stream = iterator
                var received: [AMQPDelivery] = []
                while received.count < bodies.count, let delivery = try await stream.next() {
                    received.append(delivery)
                    await connection.ack(delivery)
                }
                return received
            }
            let byID = Dictionary(uniqueKeysWithValues: deliveries.map { ($0.message.properties.messageID ?? "", $0.message) })
            #expect(byID["m0"]?.body == bodies[0] && byID["m0"]?.oversizedBodySize == nil)
            #expect(byID["m4"]?.body == bodies[4] && byID["m4"]?.oversizedBodySize == nil)
            for id in ["m1", "m2"] {
                let message = try #require(byID[id])
                #expect(message.body.isEmpty && message.oversizedBodySize != nil)
                #expect(message.oversizedBodyDeadLettered, "\(id) copied and confirmed")
            }
            let returned = try #require(byID["m3"])
            #expect(returned.oversizedBodySize == UInt64(bodies[3].count))
            #expect(!returned.oversizedBodyDeadLettered, "an unroutable copy does not count")

            var copies: [String: AMQPDeliveredMessage] = [:]
            try await eventually(.seconds(30), "both copies in the dead queue") {
                while let copy = try await connection.get(queue: dead) {
                    await connection.ack(copy)
                    copies[copy.message.properties.messageID ?? ""] = copy.message
                }
                return copies.count >= 2
            }
            #expect(copies.count == 2)
            for (id, index) in [("m1", 1), ("m2", 2)] {
                let copy = try #require(copies[id])
                #expect(copy.body == bodies[index], "\(id): the body byte for byte")
                #expect(copy.properties.headers?["n"] == .int32(Int32(index)))
                #expect(copy.properties.headers?["copied-size"] == .int64(Int64(bodies[index].count)))
            }
            #expect(connection.connectionCount == 1, "never reconnected")
            await consumer.cancel()
            for name in [queue, dead] { try await connection.deleteQueue(name) }
        }
    }
}
