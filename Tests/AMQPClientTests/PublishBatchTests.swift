// Many publishes as one command (`AMQPConnection.publish(_:)` of an array) against the shared
// test broker: each message answers for itself within the batch, and the caller is resumed once.
import Foundation
import Testing
import TestSupport

@testable import AMQPClient

@Suite(.enabled(if: TestBroker.isAvailable))
struct PublishBatchTests {
    /// A returned, a nacked and a misnamed message fail alone; the others are confirmed and
    /// reach their queue in the batch's order; the connection goes on.
    @Test func eachMessageOfABatchAnswersForItself() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("batch")
            let full = uniqueName("batch-full")
            try await connection.declareQueue(classicQueue(queue))
            try await connection.declareQueue(
                QueueDeclaration(name: full, arguments: ["x-max-length": .int(0), "x-overflow": .string("reject-publish")]))
            let results = await connection.publish([
                message("one", to: queue),
                message("nobody", to: uniqueName("no-such-queue")),
                message("two", to: queue),
                message("refused", to: full),
                message("misnamed", to: String(repeating: "q", count: 300)),
                message("three", to: queue),
            ])
            #expect(results.map { $0?.code } == [nil, .publishReturned, nil, .publishNacked, .invalidName, nil])
            let consumer = try await connection.consume(queue: queue, prefetch: 10)
            var iterator = consumer.makeAsyncIterator()
            var texts: [String] = []
            for _ in 0..<3 {
                let delivery = try #require(try await iterator.next())
                texts.append(delivery.text)
                await connection.ack(delivery)
            }
            #expect(texts == ["one", "two", "three"])
            await consumer.cancel()
            try await connection.publish(message("after", to: queue))
            #expect(try await connection.inspectQueue(queue).messageCount == 1)
            #expect(await connection.publish([]).isEmpty)
            try await connection.deleteQueue(queue)
            try await connection.deleteQueue(full)
        }
    }

    /// A batch larger than the broker confirms at once (it acks with `multiple`): every
    /// message confirmed, the caller resumed with all of them.
    @Test func aLargeBatchIsConfirmedWhole() async throws {
        let broker = try TestBroker.require()
        try await withConnection(configuration(broker)) { connection in
            let queue = uniqueName("batch-large")
            try await connection.declareQueue(classicQueue(queue))
            let results = await connection.publish((0..<2000).map { message("m\($0)", to: queue) })
            #expect(results.count == 2000 && results.allSatisfy { $0 == nil })
            #expect(try await connection.inspectQueue(queue).messageCount == 2000)
            try await connection.deleteQueue(queue)
        }
    }

    @Test func aBatchOnAClosedConnectionFailsEveryMessage() async throws {
        let broker = try TestBroker.require()
        let connection = try await AMQPConnection.connect(configuration: configuration(broker), logger: testLogger())
        await connection.close()
        let results = await connection.publish([message("a", to: "q"), message("b", to: "q")])
        #expect(results.map { $0?.code } == [.closed, .closed])
    }
}

/// The results of a batch, kept by the owner thread as the broker settles its messages.
@Suite struct PublishBatchResultsTests {
    @Test func theCallerIsResumedOnceWithEveryResultInTheBatchsOrder() async {
        let results = await withCheckedContinuation { (continuation: CheckedContinuation<[AMQPError?], Never>) in
            let batch = PublishBatch(count: 3, continuation: continuation)
            let nacked = AMQPError(.publishNacked, "nacked")
            // Settled out of order, as a return or a failure may come before an earlier ack.
            PublishWaiter.batch(batch, 2).settle(nil)
            PublishWaiter.batch(batch, 0).settle(nacked)
            PublishWaiter.batch(batch, 1).settle(nil)
        }
        #expect(results.map { $0?.code } == [.publishNacked, nil, nil])
    }

    @Test func anEmptyBatchIsResumedAtOnce() async {
        let results = await withCheckedContinuation { (continuation: CheckedContinuation<[AMQPError?], Never>) in
            _ = PublishBatch(count: 0, continuation: continuation)
        }
        #expect(results.isEmpty)
    }
}
