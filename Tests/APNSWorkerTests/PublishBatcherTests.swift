import Testing

@testable import APNSWorker

/// When a bundle's publishing settles go to the broker (`PublishBatcher`): the first of a batch
/// asks for one flush, the flush takes what gathered by its turn, a full batch goes at once.
@Suite struct PublishBatcherTests {
    @Test func theFirstSettleAsksForAFlushThatTakesEveryOneGatheredByItsTurn() {
        var batcher = PublishBatcher<Int>(limit: 10)
        guard case .flushOnNextTurn = batcher.add(1) else { Issue.record("the first asks for a flush"); return }
        for n in 2...4 {
            guard case .gathered = batcher.add(n) else { Issue.record("\(n): a flush is already asked for"); return }
        }
        #expect(batcher.take() == [1, 2, 3, 4])
        #expect(batcher.gathered.isEmpty && !batcher.flushAsked)
        guard case .flushOnNextTurn = batcher.add(5) else { Issue.record("after a take, the next one asks again"); return }
        #expect(batcher.take() == [5])
    }

    @Test func underLightLoadEachSettleIsItsOwnBatchAtOnce() {
        var batcher = PublishBatcher<Int>(limit: 10)
        for n in 1...3 {
            guard case .flushOnNextTurn = batcher.add(n) else { Issue.record("\(n) asks for its flush"); return }
            #expect(batcher.take() == [n])
        }
    }

    @Test func aFullBatchGoesAtOnceAndTheFlushAskedForTakesWhatFollows() {
        var batcher = PublishBatcher<Int>(limit: 3)
        _ = batcher.add(1)
        _ = batcher.add(2)
        guard case .flush(let full) = batcher.add(3) else { Issue.record("the third fills the batch"); return }
        #expect(full == [1, 2, 3])
        #expect(batcher.flushAsked, "the flush asked for by the first is still to come")
        guard case .gathered = batcher.add(4) else { Issue.record("that flush takes the fourth"); return }
        #expect(batcher.take() == [4])
    }

    @Test func aFlushThatFindsNothingLeavesNothingBehind() {
        var batcher = PublishBatcher<Int>(limit: 2)
        _ = batcher.add(1)
        guard case .flush(let full) = batcher.add(2) else { Issue.record("full"); return }
        #expect(full == [1, 2])
        #expect(batcher.take().isEmpty)
        guard case .flushOnNextTurn = batcher.add(3) else { Issue.record("a new batch asks again"); return }
    }

    @Test func aLimitOfOneSendsEachAtOnce() {
        var batcher = PublishBatcher<Int>(limit: 1)
        for n in 1...3 {
            guard case .flush(let batch) = batcher.add(n) else { Issue.record("\(n) goes at once"); return }
            #expect(batch == [n])
        }
        #expect(!batcher.flushAsked)
    }
}
