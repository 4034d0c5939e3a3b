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
            try await publishing.declareQueue(classicQueue(queue))
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
                // A purge drops only ready messages, and the broker hands the wide one back only
                // once it has seen the lost connection go (seconds, on a loaded node): purged
                // before that, it came back after the purge and the next get took it again.
                try await eventually(.seconds(60), "the wide message handed back by the lost connection") {
                    try await publishing.inspectQueue(queue).messageCount == 1
                }
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
            try await connection.declareQueue(classicQueue(queue))
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
            try await connection.declareQueue(classicQueue(queue))
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

    /// While gets wait for their messages, the frames of other channels read meanwhile are
    /// handled once and in order: on 4 KiB frames (every message in several frames, the gets'
    /// and the consumer's interleaved on the socket), a consumer on the same connection gets
    /// every message of its queue once, in order, none redelivered (a channel closed under it,
    /// or an ack sent twice, would close its channel and bring them back), while gets take
    /// their messages whole, the control channel is closed and opened again by refused RPCs,
    /// and publishes are confirmed.
    @Test func otherChannelsFramesAreHandledOnceAndInOrderWhileGetsWait() async throws {
        let broker = try TestBroker.require()
        var small = try configuration(broker)
        small.frameMax = 4_096
        try await withConnection(small) { connection in
            let busy = uniqueName("get-beside-consumer")
            let fetched = uniqueName("get-fetched")
            let confirmed = uniqueName("get-confirmed")
            for queue in [busy, fetched, confirmed] {
                try await connection.declareQueue(classicQueue(queue))
            }
            let total = 1_000, gets = 100
            let padding = String(repeating: ".", count: 6_000)
            for n in 0..<total { try await connection.publish(message("\(n) \(padding)", to: busy)) }
            for n in 0..<gets { try await connection.publish(message("get \(n) \(padding)", to: fetched)) }
            let consumer = try await connection.consume(queue: busy, prefetch: 50)
            let received = Task {
                var texts: [String] = []
                var redelivered = 0
                for try await delivery in consumer {
                    texts.append(String(delivery.text.prefix { $0 != " " }))
                    if delivery.message.redelivered { redelivered += 1 }
                    connection.ackNow(delivery)
                    if texts.count == total { break }
                }
                return (texts, redelivered)
            }
            for n in 0..<gets {
                let got = try #require(try await connection.get(queue: fetched))
                #expect(got.text == "get \(n) \(padding)")
                #expect(connection.ackNow(got) == .settled)
                if n % 10 == 0 {
                    await #expect(throws: AMQPError.self) { try await connection.inspectQueue(uniqueName("no-such-queue")) }
                    try await connection.publish(message("confirmed \(n)", to: confirmed))
                }
            }
            let (texts, redelivered) = try await withTimeout(.seconds(120), "every message of the consumer's queue") { try await received.value }
            #expect(texts == (0..<total).map { "\($0)" })
            #expect(redelivered == 0)
            // Ready and unacked (the management API's count lags: waited for).
            try await eventually(.seconds(60), "every ack applied") {
                (try? await broker.object("/queues/%2f/\(busy)"))?["messages"] as? Int == 0
            }
            await consumer.cancel()
            #expect(try await connection.get(queue: fetched) == nil)
            #expect(try await connection.inspectQueue(confirmed).messageCount == UInt32(gets / 10))
            for queue in [busy, fetched, confirmed] { try await connection.deleteQueue(queue) }
        }
    }
}
