import APNSWorker
import Testing

@Suite struct MinuteRateTests {
    @Test func countsEventsOfTheLastSixtySeconds() {
        var rate = MinuteRate()
        rate.record(atSecond: 100)
        rate.record(atSecond: 100, events: 2)
        rate.record(atSecond: 130)
        #expect(rate.perMinute(atSecond: 130) == 4)
        // Second 100 is still inside the window ending at 159, and gone from the one ending at 160.
        #expect(rate.perMinute(atSecond: 159) == 4)
        #expect(rate.perMinute(atSecond: 160) == 1)
        #expect(rate.perMinute(atSecond: 190) == 0)
    }

    @Test func reusesABucketOnceItsSecondHasLeftTheWindow() {
        var rate = MinuteRate()
        rate.record(atSecond: 5, events: 7)
        rate.record(atSecond: 65)  // same bucket as second 5, one window later
        #expect(rate.perMinute(atSecond: 65) == 1)
    }

    @Test func ignoresEventsOlderThanTheirBucket() {
        var rate = MinuteRate()
        rate.record(atSecond: 65, events: 2)
        rate.record(atSecond: 5)
        #expect(rate.perMinute(atSecond: 65) == 2)
    }

    @Test func doesNotCountTheFuture() {
        var rate = MinuteRate()
        rate.record(atSecond: 10)
        rate.record(atSecond: 20)
        #expect(rate.perMinute(atSecond: 15) == 1)
    }

    @Test func handlesSecondsBeforeTheOrigin() {
        var rate = MinuteRate()
        rate.record(atSecond: -3)
        rate.record(atSecond: 2)
        #expect(rate.perMinute(atSecond: 2) == 2)
    }
}
