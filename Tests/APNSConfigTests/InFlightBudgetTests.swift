import APNSConfig
import Testing

@Suite struct InFlightBudgetTests {
    static let standard = InFlightBudget(maxInFlight: InFlightBudget.defaultMaxInFlight, prefetch: 500)

    /// The default budget of 2,000 with the default prefetch of 500: (bundles, share each).
    @Test(arguments: [(1, 500), (4, 500), (5, 400), (50, 40), (62, 32)])
    func evenShareCappedByPrefetch(bundles: Int, perBundle: Int) {
        let share = Self.standard.share(bundles: bundles)
        #expect(share.perBundle == perBundle)
        #expect(share.total == perBundle * bundles)
        #expect(share.total <= 2000)
        #expect(!share.floorBinds)
        #expect(Self.standard.floorWarning(bundles: bundles) == nil)
    }

    @Test func aThousandBundlesGetTheFloorAndAWarningWithTheFigures() {
        let share = Self.standard.share(bundles: 1000)
        #expect(share == .init(perBundle: 32, total: 32_000, floorBinds: true))
        #expect(
            Self.standard.floorWarning(bundles: 1000)
                == "[amqp] maxInFlight = 2000 is less than 1000 bundles × the floor of 32 jobs each: each bundle's consumer "
                + "takes 32, up to 32000 jobs in flight; raise maxInFlight to at least 32000 or run fewer bundles per instance")
    }

    @Test func aBudgetBelowBundlesTimesFloorGivesEveryBundleTheFloor() {
        let budget = InFlightBudget(maxInFlight: 100, prefetch: 500)
        #expect(budget.share(bundles: 3) == .init(perBundle: 33, total: 99, floorBinds: false))
        #expect(budget.share(bundles: 4) == .init(perBundle: 32, total: 128, floorBinds: true))
        #expect(budget.floorWarning(bundles: 4)?.hasPrefix("[amqp] maxInFlight = 100 is less than 4 bundles × the floor of 32") == true)
        // One bundle and a budget under the floor: the floor still wins.
        #expect(InFlightBudget(maxInFlight: 10, prefetch: 500).share(bundles: 1) == .init(perBundle: 32, total: 32, floorBinds: true))
    }

    @Test func aPrefetchBelowTheShareOrTheFloorIsTheMost() {
        // The budget would give 250 each: prefetch 100 caps it, and the instance holds less than its budget.
        #expect(
            InFlightBudget(maxInFlight: 1000, prefetch: 100).share(bundles: 4)
                == .init(perBundle: 100, total: 400, floorBinds: false, ceiling: 250))
        // prefetch under the floor: prefetch is still the most a consumer takes.
        #expect(InFlightBudget(maxInFlight: 1000, prefetch: 10).share(bundles: 500) == .init(perBundle: 10, total: 5000, floorBinds: true))
        #expect(
            InFlightBudget(maxInFlight: 1000, prefetch: 10).share(bundles: 50) == .init(perBundle: 10, total: 500, floorBinds: false, ceiling: 20))
    }

    /// A written prefetch is a bound (contract §3): no window grows past where its consumer
    /// starts, whatever the budget, the prefetch and the bundles; unwritten, the window may grow
    /// to the share of the budget.
    @Test func aWrittenPrefetchIsTheMostEveryWindowHolds() {
        for maxInFlight in [1, 32, 100, 2000, 1_000_000] {
            for prefetch in [1, 20, 500, 65_535] {
                let written = InFlightBudget(maxInFlight: maxInFlight, prefetch: prefetch, prefetchBoundsWindow: true)
                for bundles in [1, 2, 7, 62, 500] {
                    let share = written.share(bundles: bundles)
                    #expect(share.ceiling == share.perBundle && share.ceiling <= prefetch)
                    for start in [1, share.perBundle / 2, share.perBundle] where start >= 1 {
                        let bounds = written.bounds(start: start, share: share)
                        #expect(bounds.ceiling == start && bounds.limit(forWindowShare: 65_535) == start)
                    }
                }
            }
        }
        let unwritten = InFlightBudget(maxInFlight: 2000, prefetch: 20)
        let share = unwritten.share(bundles: 1)
        #expect(share == .init(perBundle: 20, total: 20, floorBinds: false, ceiling: 2000))
        #expect(unwritten.bounds(start: 20, share: share) == BundleInFlightBounds(floor: 20, ceiling: 2000))
    }

    /// Whole shares that never add up to more than the budget while the floor does not bind.
    @Test func sharesAreWholeAndSumWithinTheBudget() {
        for maxInFlight in [1, 31, 32, 33, 100, 999, 2000, 65_535, 1_000_000] {
            for prefetch in [1, 7, 32, 500, 65_535] {
                let budget = InFlightBudget(maxInFlight: maxInFlight, prefetch: prefetch)
                for bundles in 1...120 {
                    let share = budget.share(bundles: bundles)
                    #expect(share.perBundle >= 1 && share.perBundle <= prefetch)
                    #expect(share.total == share.perBundle * bundles)
                    #expect(share.floorBinds == (budget.floorWarning(bundles: bundles) != nil))
                    #expect(share.ceiling >= share.perBundle && share.ceiling <= max(share.perBundle, 65_535))
                    if share.ceiling > share.perBundle { #expect(share.ceiling * bundles <= maxInFlight) }
                    if !share.floorBinds {
                        #expect(share.total <= maxInFlight, "budget \(maxInFlight), prefetch \(prefetch), \(bundles) bundles")
                    } else {
                        #expect(share.perBundle == min(InFlightBudget.defaultFloor, prefetch))
                    }
                }
            }
        }
    }

    /// The prefetch is where a window starts; it grows to the whole share, so one
    /// bundle can hold what a 50 ms round trip needs, and many bundles stay within the budget.
    @Test func theWindowCeilingIsTheWholeShareNotThePrefetch() {
        #expect(Self.standard.share(bundles: 1).ceiling == 2000)
        #expect(Self.standard.share(bundles: 4).ceiling == 500)
        #expect(Self.standard.share(bundles: 50).ceiling == 40)
        #expect(Self.standard.share(bundles: 1000).ceiling == 32)
        #expect(InFlightBudget(maxInFlight: 1_000_000, prefetch: 500).share(bundles: 1).ceiling == 65_535)
        // A written prefetch is only where the window starts (the kit writes 500).
        #expect(InFlightBudget(maxInFlight: 4000, prefetch: 20).share(bundles: 1).ceiling == 4000)
        #expect(InFlightBudget(maxInFlight: 2000, prefetch: 500).share(bundles: 1) == .init(perBundle: 500, total: 500, floorBinds: false, ceiling: 2000))
    }

    @Test func noBundlesCountsAsOne() {
        #expect(Self.standard.share(bundles: 0) == Self.standard.share(bundles: 1))
    }
}
