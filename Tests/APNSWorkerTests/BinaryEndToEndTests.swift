/// The binary provider transport end to end: the real broker, the real `apns-worker` process
/// and the simulator's binary gateway. Bad tokens at the first position, in the middle, two in
/// a row and at the last position of a few hundred jobs: one feedback event each, every other
/// job delivered exactly once, nothing lost.
import AMQPClient
import APNSBinaryProtocol
import APNSModel
import APNSSimulator
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct BinaryEndToEndTests {
    @Test func invalidTokensAmongHundredsOfJobsAreReportedOnceAndTheRestDeliveredOnce() async throws {
        var options = WorkerHarness.Options()
        // Three times the default: the error response must come back within the window even on
        // CI's two oversubscribed cores (see BinaryIntegration.holdWindow).
        options.binaryHoldWindow = "3s"
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let jobCount = 300
        let badPositions: Set<Int> = [0, 150, 151, jobCount - 1]
        let tokens = (0..<jobCount).map { WorkerHarness.token($0 + 50_000) }
        for position in badPositions { h.simulator.script(token: tokens[position], .binaryStatus(8)) }
        // Published in order before the worker starts, so the work queue holds them in order.
        var ids: [UUID] = []
        for token in tokens { ids.append(try await h.publishJob(token: token)) }
        let worker = try h.startWorker()
        defer { worker.kill9() }

        var events: [[String: Any]] = []
        try await waitUntil("a feedback event per bad token", timeout: .seconds(120)) {
            for delivery in try await h.drain(h.feedbackQueue) {
                events.append(try #require(try JSONSerialization.jsonObject(with: Data(delivery.message.body)) as? [String: Any]))
            }
            return events.count >= badPositions.count
        }
        try await waitUntil("an empty work queue", timeout: .seconds(120)) { try await h.messageCount(h.workQueue) == 0 }
        let goodTokens = tokens.enumerated().filter { !badPositions.contains($0.offset) }.map(\.element)
        try await waitUntil("every good job delivered", timeout: .seconds(30)) {
            let counts = h.acceptedTokenCounts()
            return goodTokens.allSatisfy { counts[$0] != nil }
        }
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(15)) == 0)
        // Anything published late would show up now.
        for delivery in try await h.drain(h.feedbackQueue) {
            events.append(try #require(try JSONSerialization.jsonObject(with: Data(delivery.message.body)) as? [String: Any]))
        }

        #expect(events.count == badPositions.count)
        let byToken = Dictionary(grouping: events) { $0["token"] as? String ?? "" }
        for position in badPositions {
            let token = tokens[position]
            #expect(byToken[token]?.count == 1, "feedback for position \(position)")
            #expect(byToken[token]?.first?["reason"] as? String == "InvalidToken")
            #expect(byToken[token]?.first?["jobId"] as? String == ids[position].uuidString)
        }
        let counts = h.acceptedTokenCounts()
        #expect(badPositions.allSatisfy { counts[tokens[$0]] == nil })
        // One error response per bad token: none was sent twice.
        #expect(h.simulator.counters().count(BinaryStatus.invalidToken) == badPositions.count)
        let notOnce = goodTokens.filter { counts[$0] != 1 }
        #expect(notOnce.isEmpty, "\(notOnce.count) good jobs not delivered exactly once")
        #expect(try await h.messageCount(h.workQueue) == 0)
        #expect(try await h.messageCount(h.deadQueue) == 0)
        for delay in [Duration.milliseconds(300), .milliseconds(600)] {
            #expect(try await h.messageCount(TopologyNames.retryQueue(h.bundle, delay: delay)) == 0)
        }
        await h.shutdown()
    }
}
