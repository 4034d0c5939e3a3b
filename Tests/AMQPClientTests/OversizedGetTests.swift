// A body over the limit taken with `basic.get` (a held bundle's probe) is copied where the caller
// says, frame by frame as it arrives, as a consumer's is (contract §4: every dead letter carries
// the x-apns-* headers), against the shared test broker.
import AMQPClient
import Foundation
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable))
struct OversizedGetTests {
    /// Bodies just over the limit and of several MiB, each taken with `basic.get`: the copy
    /// reaches its queue byte for byte with the copy's properties, and the get returns the
    /// message marked, without its body, once the broker confirmed it. An unroutable copy comes
    /// unmarked (the caller's fallback). Small bodies pass untouched. (Before, the get took no
    /// copy route: the probe rejected such a job, and the broker's dead letter had no x-apns-*.)
    @Test func anOversizedBodyTakenWithGetIsCopiedAsItArrives() async throws {
        let broker = try TestBroker.require()
        try await withConnection(try configuration(broker, name: uniqueName("oversized-get"))) { connection in
            let queue = uniqueName("oversized-get"), dead = uniqueName("oversized-get.dead")
            for name in [queue, dead] {
                try await connection.declareQueue(classicQueue(name))
            }
            let limit = 64 * 1024
            let bodies: [[UInt8]] = [
                (0..<(limit + 1)).map { UInt8(truncatingIfNeeded: $0 &* 7) },
                Array("small".utf8),
                (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13) },
                Array("unroutable".utf8) + [UInt8](repeating: 0x55, count: limit * 2),
            ]
            for (index, body) in bodies.enumerated() {
                var properties = AMQPProperties.persistentJSON
                properties.messageID = "m\(index)"
                try await connection.publish(AMQPOutboundMessage(exchange: "", routingKey: queue, body: body, properties: properties))
            }
            let route: AMQPOversizedDeadLetter = { properties, size in
                var copy = properties
                copy.headers = ["copied-size": .int64(Int64(size))]
                let target = properties.messageID == "m3" ? uniqueName("nowhere") : dead
                return AMQPOutboundMessage(exchange: "", routingKey: target, body: [], properties: copy)
            }
            var taken: [String: AMQPDeliveredMessage] = [:]
            for _ in bodies {
                let delivery = try #require(try await connection.get(queue: queue, maxBodySize: limit, oversizedDeadLetter: route))
                taken[delivery.message.properties.messageID ?? ""] = delivery.message
                await connection.ack(delivery)
            }
            #expect(taken["m1"]?.body == bodies[1] && taken["m1"]?.oversizedBodySize == nil)
            for id in ["m0", "m2"] {
                let message = try #require(taken[id])
                #expect(message.body.isEmpty && message.oversizedBodySize != nil)
                #expect(message.oversizedBodyDeadLettered, "\(id) copied and confirmed")
            }
            #expect(taken["m3"]?.oversizedBodyDeadLettered == false, "an unroutable copy does not count")

            var copies: [String: AMQPDeliveredMessage] = [:]
            try await eventually(.seconds(30), "both copies in the dead queue") {
                while let copy = try await connection.get(queue: dead) {
                    await connection.ack(copy)
                    copies[copy.message.properties.messageID ?? ""] = copy.message
                }
                return copies.count >= 2
            }
            #expect(copies.count == 2)
            for (id, index) in [("m0", 0), ("m2", 2)] {
                let copy = try #require(copies[id])
                #expect(copy.body == bodies[index], "\(id): the body byte for byte")
                #expect(copy.properties.headers?["copied-size"] == .int64(Int64(bodies[index].count)))
            }
            // The connection goes on: a small message after them all.
            try await connection.publish(AMQPOutboundMessage(exchange: "", routingKey: queue, body: [1, 2, 3], properties: .persistentJSON))
            let last = try #require(try await connection.get(queue: queue, maxBodySize: limit, oversizedDeadLetter: route))
            #expect(last.message.body == [1, 2, 3])
            await connection.ack(last)
            for name in [queue, dead] { _ = try await connection.deleteQueue(name) }
        }
    }
}
