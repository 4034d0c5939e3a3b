import Logging
import Synchronization
import Testing

@testable import AMQPClient

/// Which refusals of a declaration pass by themselves (`AMQPError.isTransient`), and the
/// declaration that waits them out (`declareWaitingForTheBroker`), as `apns-worker run`, the
/// registry and the fleet declare at start-up and the tests' harnesses do. CI saw a quorum
/// queue's declaration refused with `541 INTERNAL_ERROR … cluster_not_formed` on a busy node,
/// and the worker (and the test) gave up.
@Suite struct TransientRefusalTests {
    static let clusterNotFormed = AMQPError(
        .connectionClosedByServer, "declaring queue 'apns.jobs.com.example' failed: the broker closed the connection", replyCode: 541,
        replyText: "INTERNAL_ERROR - Cannot declare a queue 'queue 'apns.jobs.com.example' in vhost '/'' on node 'rabbit@ci': cluster_not_formed",
        queue: "apns.jobs.com.example")

    @Test func aNodeNotReadyOrNoConnectionIsTransientAndEveryOtherAnswerIsNot() {
        #expect(Self.clusterNotFormed.isTransient)
        #expect(AMQPError(.channelClosed, "declare failed", replyCode: 541, replyText: "INTERNAL_ERROR").isTransient)
        #expect(AMQPError(.notConnected, "not connected to the broker (reconnecting)").isTransient)
        #expect(AMQPError(.connectionLost, "the connection died").isTransient)
        // Answers that declaring again would only repeat.
        #expect(!AMQPError(.declarationConflict, "conflict", replyCode: 406, replyText: "PRECONDITION_FAILED - inequivalent arg").isTransient)
        #expect(!AMQPError(.channelClosed, "declare failed", replyCode: 403, replyText: "ACCESS_REFUSED").isTransient)
        #expect(!AMQPError(.channelClosed, "declare failed", replyCode: 404, replyText: "NOT_FOUND").isTransient)
        #expect(!AMQPError(.channelClosed, "declare failed", replyCode: 406, replyText: "PRECONDITION_FAILED").isTransient)
        #expect(AMQPError(.connectionClosedByServer, "closed", replyCode: 320, replyText: "CONNECTION_FORCED").isTransient, "a node stopping")
        #expect(!AMQPError(.closed, "the connection is closed").isTransient)
        #expect(!AMQPError(.invalidName, "too long").isTransient)
    }

    /// Refuses the first `refusals` declarations with `error`, then takes them.
    final class RefusingBroker: TopologyDeclaring {
        let error: AMQPError
        let refusals: Int
        let attempts = Atomic<Int>(0)

        init(_ error: AMQPError, refusals: Int) {
            self.error = error
            self.refusals = refusals
        }

        func declare(_ plan: TopologyPlan) async throws {
            if attempts.add(1, ordering: .relaxed).newValue <= refusals { throw error }
        }
        func declareExchange(_ exchange: ExchangeDeclaration) async throws {}
        func declareQueue(_ queue: QueueDeclaration) async throws -> AMQPQueueInfo { AMQPQueueInfo(name: queue.name, messageCount: 0, consumerCount: 0) }
        func deleteQueue(_ name: String, ifUnused: Bool, ifEmpty: Bool) async throws -> UInt32 { 0 }
        func purgeQueue(_ name: String) async throws -> UInt32 { 0 }
        func inspectQueue(_ name: String) async throws -> AMQPQueueInfo { AMQPQueueInfo(name: name, messageCount: 0, consumerCount: 0) }
    }

    static let plan = TopologyPlan(queues: [QueueDeclaration(name: "apns.jobs.com.example", arguments: ["x-queue-type": .string("quorum")])])

    @Test func aNodeNotReadyIsWaitedForAndTheTopologyDeclaredOnceItIs() async throws {
        let broker = RefusingBroker(Self.clusterNotFormed, refusals: 3)
        try await broker.declareWaitingForTheBroker(Self.plan, logger: Logger(label: "test"), backoff: AMQPBackoff(initial: .milliseconds(1), maximum: .milliseconds(4)))
        #expect(broker.attempts.load(ordering: .relaxed) == 4)
    }

    @Test func anAnswerThatWouldNotChangeIsThrownAtOnce() async throws {
        let conflict = AMQPError(.declarationConflict, "conflict", replyCode: 406, replyText: "PRECONDITION_FAILED")
        let broker = RefusingBroker(conflict, refusals: 1)
        await #expect(throws: conflict) {
            try await broker.declareWaitingForTheBroker(Self.plan, logger: Logger(label: "test"), backoff: AMQPBackoff(initial: .milliseconds(1), maximum: .milliseconds(4)))
        }
        #expect(broker.attempts.load(ordering: .relaxed) == 1)
    }
}
