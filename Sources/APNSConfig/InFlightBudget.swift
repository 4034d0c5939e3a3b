/// The process-wide bound on jobs in flight (`[amqp] maxInFlight`), turned into the prefetch each
/// bundle's consumer starts with and the most its in-flight window may grow to.
///
/// RabbitMQ's prefetch is per consumer (its channel-wide "global" qos is gone in 4.x), so the only
/// bound across bundles is the one the worker computes: every bundle gets the same static share of
/// the budget. A bundle's consumer starts at that share, at most `[amqp] prefetch`, never less than
/// a floor that keeps a bundle's two HTTP/2 connections busy. With `prefetch` unwritten, its window
/// then grows with the round trip up to the whole share (`ceiling`): the default 500 is only where
/// it starts, since a window capped there drains about 10,000 jobs/s at a 50 ms round trip. A
/// written `prefetch` is a bound (contract §3: the most unacked jobs per bundle and instance, and so
/// the most a crash or a lost queue leader can send twice): the window never grows past it
/// (`prefetchBoundsWindow`). When the bundles need more than the budget to get the floor each, the
/// floor wins (a bundle that cannot take jobs would starve) and `floorWarning` says by how much.
public struct InFlightBudget: Sendable, Hashable {
    /// The default `[amqp] maxInFlight`: one bundle's window may hold 2,000 jobs (40,000 jobs/s at
    /// a 50 ms round trip, above what the worker's CPU drains at 0 ms; 20,000 at 100 ms), four
    /// bundles start at the full default prefetch of 500, and 50 draining bundles hold 2,000 jobs
    /// (about 8.4 MiB at 4.3 KB a job; the worst case of bodies held unchanged) instead of 25,000.
    public static let defaultMaxInFlight = 2000
    /// The least a bundle's consumer takes when the budget is shared thin. A bundle's throughput
    /// is about its jobs in flight divided by the APNs round trip: 32 is 16 streams on each of
    /// its 2 connections, 1,600 jobs/s at a 20 ms round trip and 320 jobs/s at 100 ms. With the
    /// default budget it binds only beyond 62 bundles.
    public static let defaultFloor = 32

    /// Most jobs in flight across every bundle of the instance.
    public var maxInFlight: Int
    /// Most jobs one bundle's consumer takes (`[amqp] prefetch`).
    public var prefetch: Int
    /// The least one bundle's consumer takes (itself capped by `prefetch`).
    public var floor: Int
    /// `prefetch` was written: no window grows past what its consumer starts with.
    public var prefetchBoundsWindow: Bool
    public init(maxInFlight: Int, prefetch: Int, floor: Int = defaultFloor, prefetchBoundsWindow: Bool = false) {
        precondition(maxInFlight >= 1 && prefetch >= 1 && floor >= 1, "budget, prefetch and floor are at least 1")
        self.maxInFlight = maxInFlight
        self.prefetch = prefetch
        self.floor = floor
        self.prefetchBoundsWindow = prefetchBoundsWindow
    }

    /// What `bundles` consumers each get.
    public struct Share: Sendable, Hashable {
        /// The prefetch of every bundle's consumer: whole, the same for all.
        public var perBundle: Int
        /// The most jobs the instance holds at once: `perBundle` × bundles.
        public var total: Int
        /// True when the floor (not the budget) set `perBundle`, so `total` exceeds the budget.
        public var floorBinds: Bool
        /// The most one bundle's in-flight window grows to: its whole share of the budget (at
        /// least `perBundle`, at most 65,535, AMQP's largest prefetch).
        public var ceiling: Int

        public init(perBundle: Int, total: Int, floorBinds: Bool, ceiling: Int? = nil) {
            self.perBundle = perBundle
            self.total = total
            self.floorBinds = floorBinds
            self.ceiling = ceiling ?? perBundle
        }
    }

    /// The even share of the budget for `bundles` consumers (at least 1), capped by `prefetch`,
    /// never under the floor (nor under 1). The remainder of the division stays unused: fewer
    /// jobs than `bundles` out of the budget, and every bundle is treated alike.
    public func share(bundles: Int) -> Share {
        let count = max(bundles, 1)
        let floor = min(self.floor, prefetch)
        let even = maxInFlight / count
        let perBundle = min(prefetch, max(floor, even))
        let ceiling = prefetchBoundsWindow ? perBundle : max(perBundle, min(Int(UInt16.max), even))
        return Share(perBundle: perBundle, total: perBundle * count, floorBinds: even < floor, ceiling: ceiling)
    }

    /// One bundle's bounds, its consumer starting at `start` (its pool's part of `share`, at most
    /// `share.perBundle`). Under a written `prefetch` the window stays at `start`: growing would
    /// re-consume, and while a re-consume's old and new consumers both hold deliveries the
    /// broker's unacked count for the bundle is their sum, over the bound.
    public func bounds(start: Int, share: Share) -> BundleInFlightBounds {
        BundleInFlightBounds(floor: start, ceiling: prefetchBoundsWindow ? start : share.ceiling)
    }

    /// The start-up warning when the floor binds, with the figures; nil when the budget holds.
    public func floorWarning(bundles: Int) -> String? {
        let share = share(bundles: bundles)
        guard share.floorBinds else { return nil }
        return "[amqp] maxInFlight = \(maxInFlight) is less than \(bundles) bundle\(bundles == 1 ? "" : "s") × the floor of \(share.perBundle) jobs each: "
            + "each bundle's consumer takes \(share.perBundle), up to \(share.total) jobs in flight; "
            + "raise maxInFlight to at least \(share.total) or run fewer bundles per instance"
    }
}

/// One bundle consumer's in-flight bounds while it runs: where its window starts (`floor`, its
/// starting prefetch) and the most it takes (`ceiling`, its share of `[amqp] maxInFlight`).
/// Worked out from the configuration in force, so a reload that adds or removes bundles gives
/// the running consumers their new share too (`WorkerService.apply`), not only the new ones.
public struct BundleInFlightBounds: Sendable, Hashable {
    public var floor: Int
    public var ceiling: Int

    public init(floor: Int, ceiling: Int) {
        self.floor = max(1, floor)
        self.ceiling = max(self.floor, ceiling)
    }

    /// The consumer's bound for its share of its pool's window: never under the floor, never
    /// over the ceiling.
    public func limit(forWindowShare share: Int) -> Int {
        min(ceiling, max(floor, share))
    }

    /// No bound beyond the starting prefetch's (a pipeline built without a budget: tests, benches).
    public static func unbounded(floor: Int) -> BundleInFlightBounds {
        BundleInFlightBounds(floor: floor, ceiling: .max)
    }
}
