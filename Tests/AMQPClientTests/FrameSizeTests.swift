// The negotiated frame size against the shared test broker: what the client proposes is what
// the broker reports, and a body many times larger than a frame goes out and comes back whole;
// content headers up to the broker's own frame size arrive without the connection dropping.
import AMQPClient
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable))
struct FrameSizeTests {
    @Test func bodiesLargerThanAFrameRoundTripOnTheSmallestFrames() async throws {
        let broker = try TestBroker.require()
        var small = try configuration(broker, name: uniqueName("frame-4k"))
        small.frameMax = 4_096
        let defaults = try configuration(broker, name: uniqueName("frame-default"))
        try await withConnection(defaults) { _ in
            try await withConnection(small) { connection in
                var frameMax: [String: Int] = [:]
                try await eventually(.seconds(30), "both connections listed by the management API") {
                    for entry in try await broker.array("/connections") {
                        if let name = (entry["client_properties"] as? [String: Any])?["connection_name"] as? String,
                            let value = entry["frame_max"] as? Int
                        {
                            frameMax[name] = value
                        }
                    }
                    return frameMax[small.connectionName] != nil && frameMax[defaults.connectionName] != nil
                }
                #expect(frameMax[small.connectionName] == 4_096)
                // By default the broker's offer is taken (RabbitMQ's default, 128 KiB).
                #expect(frameMax[defaults.connectionName] == 131_072)

                let queue = uniqueName("frames")
                try await connection.declareQueue(classicQueue(queue))
                let body = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
                try await connection.publish(AMQPOutboundMessage(exchange: "", routingKey: queue, body: body, properties: .persistentJSON, mandatory: true))
                let consumer = try await connection.consume(queue: queue, prefetch: 1)
                var iterator = consumer.makeAsyncIterator()
                let delivery = try #require(try await iterator.next())
                #expect(delivery.message.body == body)
                #expect(await connection.ack(delivery) == .settled)
                await consumer.cancel()
                try await connection.deleteQueue(queue)
            }
        }
    }

    /// The broker sends a content header unsplit, as large as its own frame_max allows. At the
    /// client's old 16 KiB, librabbitmq refused 17 KiB of headers, the connection dropped and the
    /// redelivered message dropped it again, forever. Now every one arrives, once and
    /// not redelivered; over 16 KiB of properties it is marked, its header table not kept.
    @Test func headersUpToTheBrokersFrameSizeArriveWithoutAReconnect() async throws {
        let broker = try TestBroker.require()
        var publisher = try configuration(broker, name: uniqueName("frame-publisher"))
        publisher.frameMax = 131_072
        let consumer = try configuration(broker, name: uniqueName("frame-consumer"))
        let sizes = [15 * 1024, 17 * 1024, 64 * 1024, 127 * 1024 - 300]
        try await withConnection(publisher) { publishing in
            try await withConnection(consumer) { connection in
                let queue = uniqueName("big-headers")
                try await connection.declareQueue(classicQueue(queue))
                for (index, size) in sizes.enumerated() {
                    var properties = AMQPProperties.persistentJSON
                    properties.messageID = "m\(index)"
                    properties.headers = ["filler": .bytes([UInt8](repeating: 0xAB, count: size)), "nested": .table(["n": .int32(Int32(index))])]
                    try await publishing.publish(
                        AMQPOutboundMessage(exchange: "", routingKey: queue, body: Array("body \(index)".utf8), properties: properties, mandatory: true))
                }
                let consumer = try await connection.consume(queue: queue, prefetch: 10, maxBodySize: 1024)
                let iterator = consumer.makeAsyncIterator()
                // Before, the second one dropped the connection, again and again: bounded.
                let deliveries = try await withTimeout(.seconds(60), "every message, without a reconnect") { [iterator] in
                    var stream = iterator
                    var received: [AMQPDelivery] = []
                    while received.count < sizes.count, let delivery = try await stream.next() {
                        received.append(delivery)
                        await connection.ack(delivery)
                    }
                    return received
                }
                #expect(deliveries.count == sizes.count)
                #expect(connection.connectionCount == 1, "never reconnected")
                for (index, (size, delivery)) in zip(sizes, deliveries).enumerated() {
                    #expect(!delivery.message.redelivered, "delivered once, on the first connection")
                    #expect(delivery.message.properties.messageID == "m\(index)")
                    #expect(delivery.message.body == Array("body \(index)".utf8))
                    if size <= AMQPProperties.maximumEncodedSize - 100 {
                        #expect(delivery.message.oversizedPropertiesSize == nil)
                        #expect(delivery.message.properties.headers?["nested"] == .table(["n": .int32(Int32(index))]))
                    } else {
                        #expect((delivery.message.oversizedPropertiesSize ?? 0) > size)
                        #expect(delivery.message.properties.headers == nil, "a header table over the bound is not kept")
                    }
                }
                await consumer.cancel()
                try await connection.deleteQueue(queue)
            }
        }
    }
}
