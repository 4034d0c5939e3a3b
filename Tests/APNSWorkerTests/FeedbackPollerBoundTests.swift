/// The feedback poller's memory across intervals: tuples kept for a broker
/// that refuses them are bounded, the oldest dropped first.
import APNSBinaryProtocol
import Logging
import Testing
import TestSupport

@testable import APNSWorker

@Suite struct FeedbackPollerBoundTests {
    @Test func tuplesKeptForARefusingBrokerAreBoundedOldestFirst() async throws {
        let broker = try await FeedbackPollerSeamTests.broker()
        var logger = Logger(label: "feedback-bound-tests")
        logger.logLevel = .critical
        let served = (0..<3).map { FeedbackPollerSeamTests.tuple(UInt8(10 + $0), at: UInt32(10 + $0)) }
        var poller = FeedbackPoller(bundleID: FeedbackPollerSeamTests.bundle, interval: .seconds(60), broker: broker, logger: logger) { served }
        poller.maximumUnpublished = 4
        broker.failPublishes = true
        let earlier = (0..<3).map { FeedbackPollerSeamTests.tuple(UInt8($0), at: UInt32($0)) }
        let kept = await poller.poll(unpublished: earlier)
        #expect(kept.map(\.timestamp).sorted() == [2, 10, 11, 12])
        let byDefault = FeedbackPoller(bundleID: "b", interval: .seconds(1), broker: broker, logger: logger) { [] }
        #expect(byDefault.maximumUnpublished == FeedbackStreamDecoder.defaultMaximumTuples)
    }
}
