import AMQPClient
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// Contract §4: a header the worker reads that appears more than once in a table counts as the
/// largest of its values. RabbitMQ writes a quorum queue's delivery count into the first entry of
/// `x-delivery-count` and leaves the others as the publisher sent them; a decoder that kept the
/// last entry read a forged count that never grows, and the poison-job guard never fired.
@Suite struct RepeatedHeaderTests {
    typealias T = HeaderTableBytesTests

    static func int32(_ key: String, _ value: Int32) -> [UInt8] { T.entry(key, "I", T.bigEndian(value)) }
    static func text(_ key: String, _ value: String) -> [UInt8] { T.entry(key, "S", T.long(Array(value.utf8))) }

    static func decoded(_ entries: [[UInt8]]) throws -> AMQPTable {
        try #require(AMQPWireFormat.decodeTable(T.table(entries)))
    }

    @Test(arguments: [JobHeaders.deliveryCount, JobHeaders.attempt])
    func aRepeatedCountReadsAsTheLargestOfItsValues(_ key: String) throws {
        let cases: [([[UInt8]], Int?)] = [
            ([Self.int32(key, 7), Self.int32(key, 2)], 7),
            ([Self.int32(key, 2), Self.int32(key, 7)], 7),
            ([Self.int32(key, 2), Self.text("other", "x"), Self.text(key, "9")], 9),
            // A value that is no count (text, negative, over 2^31−1) cannot hide one that is.
            ([Self.int32(key, 3), Self.text(key, "many")], 3),
            ([Self.text(key, "many"), Self.int32(key, 3)], 3),
            ([Self.int32(key, 3), Self.int32(key, -1)], 3),
            ([Self.int32(key, 3), T.entry(key, "l", T.bigEndian(Int64(1) << 40))], 3),
            ([Self.int32(key, 5), Self.int32(key, 5), Self.int32(key, 4)], 5),
        ]
        for (entries, expected) in cases {
            let envelope = JobEnvelope(try Self.decoded(entries))
            let read = key == JobHeaders.deliveryCount ? envelope.deliveryCount : envelope.attempt
            #expect(read == expected, "\(entries)")
        }
    }

    @Test func repeatedEntriesThatAreNoCountsKeepTheLastAsBefore() throws {
        let table = try Self.decoded([Self.text("dup", "first"), Self.text("dup", "second")])
        #expect(table["dup"] == .string("second"))
    }

    /// Through the real broker: a job published with `x-delivery-count` twice, both 0, handed
    /// back three times on a quorum queue. The broker counts in the first entry; the worker's
    /// reading is 3 (it read 0, the forged last entry, before).
    @Test(.enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
    func aForgedSecondDeliveryCountDoesNotHideTheBrokersCount() async throws {
        let broker = try TestBroker.require()
        let queue = uniqueName("test.repeated-count")
        try await withConnection(try configuration(broker)) { connection in
            _ = try await connection.declareQueue(QueueDeclaration(name: queue, arguments: ["x-queue-type": .string("quorum")]))
            let key = JobHeaders.deliveryCount
            let headers = T.table([Self.int32(key, 0), Self.text("between", "x"), Self.int32(key, 0)])
            let flags: UInt16 = 1 << 13
            let publisher = try RawAMQPPublisher(port: broker.amqpPort)
            try publisher.publish(exchange: "", routingKey: queue, properties: T.bigEndian(flags) + headers, body: Array("job".utf8))
            try publisher.close()
            for _ in 0..<3 {
                let delivery = try #require(try await connection.get(queue: queue))
                await connection.nack(delivery, requeue: true)
            }
            let delivery = try #require(try await connection.get(queue: queue))
            #expect(JobEnvelope(delivery.message).deliveryCount == 3)
            await connection.ack(delivery)
            _ = try await connection.deleteQueue(queue)
        }
    }
}
