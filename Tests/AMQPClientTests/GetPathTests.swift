// basic.get against the shared test broker at the edges of its path: a connection lost midway
// and the commands queued behind it, an ack after a reconnect, the body limit on small frames.
// `@testable` to see the owner thread's queue: commands queued before the connection is up are
// taken in one batch.
@testable import AMQPClient
import APNSModel
import Foundation
import Synchronization
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable))
struct GetPathTests {
    /// How a caller's command ended: nil while it waits.
    private final class Answer: Sendable {
        private let value = Mutex<String?>(nil)
        var text: String? { value.withLock { $0 } }
        func set(_ text: String) { value.withLock { $0 = text } }
    }

    /// A get whose message has a header frame over the connection's frame size (librabbitmq
    /// refuses the frame: the connection is lost in the middle of the get) answers its caller
    /// with the loss, and the RPC queued behind it, taken in the same batch, is answered too.
    /// Was: the batch's untried commands were dropped with the failure and that caller waited
    /// forever. The next get, on the next connection, takes a message on a get channel opened
    /// again.
    @Test func anRPCQueuedBehindAGetThatLosesTheConnectionIsAnswered() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { publishing in
            let queue = uniqueName("get-loses-connection")
            try await publishing.declareQueue(QueueDeclaration(name: queue, arguments: ["x-queue-type": .string("classic")]))
            var wide = AMQPProperties.persistentJSON
            wide.headers = ["filler": .bytes([UInt8](repeating: 0xAB, count: 8 * 1024))]
            try await publishing.publish(
                AMQPOutboundMessage(exchange: "", routingKey: queue, body: Array("wide".utf8), properties: wide, mandatory: true))

            var small = try configuration(broker)
            small.frameMax = 4_096
            let connection = try AMQPConnection(configuration: small, logger: testLogger())
            func queued() -> Int { connection.shared.withLock { $0.commands.count } }
            let got = Answer(), behind = Answer()
            Task {
                do { got.set("returned \(String(describing: try await connection.get(queue: queue)))") } catch { got.set("\(error)") }
            }
            try await eventually(.seconds(10), "the get queued") { queued() == 1 }
            Task {
                do { behind.set("counted \(try await connection.inspectQueue(queue).messageCount)") } catch { behind.set("\(error)") }
            }
            try await eventually(.seconds(10), "the inspection queued behind it") { queued() == 2 }
            try await connection.whileConnected {
                try await eventually(.seconds(30), "the get answered") { got.text != nil }
                #expect(got.text?.contains("connectionLost") == true, "\(got.text ?? "")")
                try await eventually(.seconds(30), "the inspection behind the get answered") { behind.text != nil }
                // Answered as a command queued while reconnecting, or on the next connection.
                let answer = behind.text ?? ""
                #expect(answer.contains("notConnected") || answer == "counted 1", "\(answer)")

                // The wide message would end every connection that gets it: gone, then the next.
                try await publishing.purgeQueue(queue)
                try await publishing.publish(message("next", to: queue))
                try await eventually(.seconds(30), "reconnected") { connection.connectionCount >= 2 && connection.state == .connected }
                let next = try #require(try await connection.get(queue: queue))
                #expect(next.text == "next")
                #expect(connection.ackNow(next) == .settled)
            }
            try await publishing.deleteQueue(queue)
        }
    }

    /// A get's delivery acked after a reconnect is `.stale` (its get channel's generation ended
    /// with the connection) and nothing is sent for it; the message comes back, redelivered, on
    /// the new connection's get channel, and that ack is taken.
    @Test func aGetsDeliveryAckedAfterAReconnectIsStale() async throws {
        let broker = try TestBroker.require()
        let name = uniqueName("get-stale")
        try await withConnection(configuration(broker, name: name)) { connection in
            let queue = uniqueName("get-stale")
            try await connection.declareQueue(QueueDeclaration(name: queue, arguments: ["x-queue-type": .string("classic")]))
            try await connection.publish(message("probe", to: queue))
            let taken = try #require(try await connection.get(queue: queue))
            try await eventually(.seconds(15), "connection listed by the management API") {
                await (try? broker.array("/connections"))?.contains { ($0["client_properties"] as? [String: Any])?["connection_name"] as? String == name } ?? false
            }
            try await broker.forceClose(connectionName: name)
            try await eventually(.seconds(15), "reconnected") { connection.connectionCount >= 2 && connection.state == .connected }
            #expect(connection.ackNow(taken) == .stale)
            var again: AMQPDelivery?
            try await eventually(.seconds(15), "the message back in its queue") {
                again = try await connection.get(queue: queue)
                return again != nil
            }
            let back = try #require(again)
            #expect(back.text == "probe" && back.message.redelivered)
            #expect(back.tag.channel == taken.tag.channel && back.tag.generation != taken.tag.generation)
            #expect(connection.ackNow(back) == .settled)
            try await eventually(.seconds(30), "acked") { try await connection.inspectQueue(queue).messageCount == 0 }
            try await connection.deleteQueue(queue)
        }
    }

    /// The get's body limit at its edges on the smallest frames (4 KiB: a body in many frames):
    /// exactly the limit is kept whole; one byte more and far more keep nothing and are marked
    /// with their size; an empty body is a message with no body frame. After each, a small
    /// message arrives whole: nothing of the one before runs into it.
    @Test func theBodyLimitAtItsEdgesOnSmallFrames() async throws {
        let broker = try TestBroker.require()
        var small = try configuration(broker)
        small.frameMax = 4_096
        let limit = 10_000
        let sizes = [limit, limit + 1, 0, 50 * limit]
        try await withConnection(small) { connection in
            let queue = uniqueName("get-edges")
            try await connection.declareQueue(QueueDeclaration(name: queue, arguments: ["x-queue-type": .string("classic")]))
            for (index, size) in sizes.enumerated() {
                try await connection.publish(AMQPOutboundMessage(
                    exchange: "", routingKey: queue, body: [UInt8](repeating: UInt8(index + 1), count: size), properties: .persistentJSON))
                try await connection.publish(message("after \(index)", to: queue))
            }
            for (index, size) in sizes.enumerated() {
                let got = try #require(try await connection.get(queue: queue, maxBodySize: limit), "body of \(size)")
                if size <= limit {
                    #expect(got.message.body == [UInt8](repeating: UInt8(index + 1), count: size) && got.message.oversizedBodySize == nil)
                } else {
                    #expect(got.message.body.isEmpty && got.message.oversizedBodySize == UInt64(size))
                }
                #expect(connection.ackNow(got) == .settled)
                let after = try #require(try await connection.get(queue: queue, maxBodySize: limit))
                #expect(after.text == "after \(index)" && after.message.oversizedBodySize == nil)
                #expect(connection.ackNow(after) == .settled)
            }
            #expect(try await connection.get(queue: queue) == nil)
            try await connection.deleteQueue(queue)
        }
    }
}
