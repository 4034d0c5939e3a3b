import Foundation

/// Jobs per second by end over the last 15 minutes, fleet-wide and per bundle, from heartbeats.
///
/// A heartbeat carries counts since its sender started; the difference from the sender's
/// previous heartbeat is the work done in between, and is added to the time bucket the new
/// heartbeat arrived in. An instance's first heartbeat only sets its baseline (its counts may
/// span hours), and a forgotten instance takes its baseline with it. Pure: time is a `Date`.
public struct FleetRates: Sendable {
    /// Width of one point of the graph.
    public let bucketSeconds: Int
    /// How far back the graph goes.
    public let windowSeconds: Int

    /// bucket index (seconds since 1970 / width) → bundle → end → jobs.
    private var buckets: [Int64: [String: [FleetEnd: Int]]] = [:]
    private var baselines: [String: [String: [FleetEnd: Int]]] = [:]

    /// Distinct bundles one bucket keeps apart (the rest share `otherBundles`).
    public static let maxBundlesPerBucket = 1000
    /// The bucket key of the work of bundles beyond `maxBundlesPerBucket`: not a bundle ID a
    /// heartbeat can carry (those have no control characters), so no bundle's graph shows it.
    public static let otherBundles = "\u{0}other"

    public init(bucketSeconds: Int = 10, windowSeconds: Int = 15 * 60) {
        self.bucketSeconds = max(bucketSeconds, 1)
        self.windowSeconds = max(windowSeconds, self.bucketSeconds)
    }

    public var bucketCount: Int { windowSeconds / bucketSeconds }

    func bucket(of date: Date) -> Int64 { Int64((date.timeIntervalSince1970 / Double(bucketSeconds)).rounded(.down)) }

    public mutating func record(instance: String, counts: [String: [FleetEnd: Int]], at now: Date) {
        defer { baselines[instance] = counts }
        guard let previous = baselines[instance] else { return }
        let index = bucket(of: now)
        var slot = buckets[index, default: [:]]
        for (bundleID, ends) in counts {
            // Bounded memory whatever the heartbeats claim: past `maxBundlesPerBucket` bundles in
            // one bucket the work still counts fleet-wide, under `otherBundles`.
            let key = slot[bundleID] != nil || slot.count < Self.maxBundlesPerBucket ? bundleID : Self.otherBundles
            for (end, count) in ends {
                // Counts only grow within one process; a smaller one is treated as a fresh start.
                // Overflow-checked: the counts come from outside (FleetView checks them first,
                // but this type must not trap on any input).
                let (delta, overflow) = count.subtractingReportingOverflow(previous[bundleID]?[end] ?? 0)
                guard delta > 0, !overflow else { continue }
                let sum = slot[key]?[end] ?? 0
                slot[key, default: [:]][end] = sum.saturatingAdd(delta)
            }
        }
        buckets[index] = slot
        let oldest = index - Int64(bucketCount)
        buckets = buckets.filter { $0.key > oldest }
    }

    public mutating func forget(instance: String) {
        baselines[instance] = nil
    }

    /// One point per bucket, oldest first.
    public struct Point: Sendable, Hashable {
        public var start: Date
        /// Jobs per second by end.
        public var perSecond: [FleetEnd: Double]

        public init(start: Date, perSecond: [FleetEnd: Double]) {
            self.start = start
            self.perSecond = perSecond
        }
    }

    /// The whole window at `now`, every bucket present (zero when nothing was heard), for every
    /// bundle together, or one bundle. It ends with the last complete bucket: the one `now` is
    /// in is still filling, and drawn it would look like a drop.
    public func series(now: Date, bundleID: String? = nil) -> [Point] {
        let last = bucket(of: now) - 1
        return (0..<Int64(bucketCount)).reversed().map { back in
            let index = last - back
            var perSecond: [FleetEnd: Double] = [:]
            for end in FleetEnd.allCases { perSecond[end] = 0 }
            for (bundle, ends) in buckets[index] ?? [:] where bundleID == nil || bundle == bundleID {
                for (end, count) in ends { perSecond[end, default: 0] += Double(count) / Double(bucketSeconds) }
            }
            return Point(start: Date(timeIntervalSince1970: Double(index * Int64(bucketSeconds))), perSecond: perSecond)
        }
    }

    /// Jobs of one bundle (or all) by end in the last `seconds` (whole buckets), for the per-minute rates.
    public func recent(now: Date, seconds: Int = 60, bundleID: String? = nil) -> [FleetEnd: Int] {
        let last = bucket(of: now)
        let span = Int64(max(1, seconds / bucketSeconds))
        var total: [FleetEnd: Int] = [:]
        for end in FleetEnd.allCases { total[end] = 0 }
        for (index, bundles) in buckets where index > last - span && index <= last {
            for (bundle, ends) in bundles where bundleID == nil || bundle == bundleID {
                for (end, count) in ends { total[end] = total[end, default: 0].saturatingAdd(count) }
            }
        }
        return total
    }
}
