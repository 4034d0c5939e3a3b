import APNSSoak
import Testing

@Suite struct ResourceTrendTests {
    /// One quiet sample a minute over six epochs of five minutes; `value` gives each from its epoch and minute.
    private func points(_ value: (_ epoch: Int, _ minute: Int) -> Double) -> [TrendPoint] {
        (0..<6).flatMap { epoch in
            (0..<5).map { minute in
                TrendPoint(seconds: Double((epoch * 5 + minute) * 60), value: value(epoch, minute), group: epoch)
            }
        }
    }

    @Test func aLeakResetByEveryRestartIsFoundWithinItsEpochs() {
        // Two channels a minute, all closed by each broker restart: one line through every sample
        // would see a saw-tooth with almost no slope.
        let sawTooth = points { _, minute in Double(6 + 2 * minute) }
        let verdict = ResourceTrend.judge("channels", sawTooth, tolerance: .count(slack: 2, "test"))
        #expect(abs(verdict.slopePerHour! - 120) < 1e-9)
        #expect(verdict.isGrowing)
        #expect(verdict.line.contains("GROWING"))
    }

    @Test func aFlatResourceWithALevelOfItsOwnInEachEpochIsFlat() {
        // Each restart may settle at another level (one connection more or less): no growth within.
        let levels = points { epoch, _ in Double(10 + epoch % 3) }
        let verdict = ResourceTrend.judge("fds", levels, tolerance: .count(slack: 4, "test"))
        #expect(verdict.slopePerHour == 0)
        #expect(!verdict.isGrowing)
        #expect(verdict.line.contains("flat"))
    }

    @Test func oneSampleCaughtMidReconnectStaysWithinTheSlack() {
        let noisy = points { epoch, minute in epoch == 3 && minute == 4 ? 9 : 8 }
        let verdict = ResourceTrend.judge("channels", noisy, tolerance: .count(slack: 2, "test"))
        #expect(verdict.growth > 0)
        #expect(!verdict.isGrowing)
    }

    @Test func aSlowLeakOverALongRunExceedsTheSlack() {
        // One channel every three minutes, never reset: 30 minutes rise ten.
        let slow = (0..<30).map { TrendPoint(seconds: Double($0 * 60), value: Double(8 + $0 / 3), group: 0) }
        let verdict = ResourceTrend.judge("channels", slow, tolerance: .count(slack: 2, "test"))
        #expect(verdict.isGrowing)
        #expect(verdict.growth > 9 && verdict.growth < 11)
    }

    @Test func tooFewSamplesGiveNoSlopeAndNoGrowth() {
        let lonely = [TrendPoint(seconds: 0, value: 5, group: 0), TrendPoint(seconds: 60, value: 50, group: 1)]
        let verdict = ResourceTrend.judge("threads", lonely, tolerance: .count(slack: 4, "test"))
        #expect(verdict.slopePerHour == nil)
        #expect(verdict.growth == 0)
        #expect(!verdict.isGrowing)
        #expect(verdict.line.contains("slope none"))
        #expect(ResourceTrend.pooledSlope([]) == nil)
    }

    @Test func memoryToleranceIsAFractionWithAFloor() {
        #expect(TrendTolerance.memory(floorMiB: 16, fraction: 0.1, first: 50).growth == 16)
        #expect(TrendTolerance.memory(floorMiB: 16, fraction: 0.1, first: 400).growth == 40)
    }
}
