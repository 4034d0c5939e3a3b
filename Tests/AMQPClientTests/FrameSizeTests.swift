// The negotiated frame size against the shared test broker: what the client proposes is what
// the broker reports, and a body many times larger than a frame goes out and comes back whole.
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
                #expect(frameMax[defaults.connectionName] == AMQPConfiguration(urls: small.urls).frameMax)

                let queue = uniqueName("frames")
                try await connection.declareQueue(QueueDeclaration(name: queue, arguments: ["x-queue-type": .string("classic")]))
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
}
