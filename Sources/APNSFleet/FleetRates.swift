import APNSModel
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
    private var buckets: [Int64: [String: [JobEnd: Int]]] = [:]
    /// bucket index → end → jobs of every bundle together: what the graph draws, read without
    /// going through a bucket's bundles (up to 1,000 each), so drawing it costs the same for a
    /// fleet of one bundle as for a forged view of thousands.
    private var fleetBuckets: [Int64: [JobEnd: Int]] = [:]
    private var baselines: [String: [String: [JobEnd: Int]]] = [:]
    /// What each bucket costs (`FleetMemory`), and their sum: at most `maxBytes`. The baselines
    /// are counted by `FleetView` with the instances they belong to.
    private var bucketBytes: [Int64: Int] = [:]
    public private(set) var bytes = 0

    /// Distinct bundles one bucket keeps apart (the rest share `otherBundles`).
    public static let maxBundlesPerBucket = 1000
    /// The bucket key of the work of bundles beyond `maxBundlesPerBucket`: not a bundle ID a
    /// heartbeat can carry (those have no control characters), so no bundle's graph shows it.
    public static let otherBundles = "\u{0}other"
    /// The history's share of `FleetView.maxBytes`: 90 buckets of 1,000 bundles with 255-byte
    /// keys would be about 50 MB. Past it, a bundle new to a bucket counts under `otherBundles`.
    public static let maxBytes = 3 << 20
    /// A bucket's own dictionary and its slot, and its fleet-wide total (`fleetBuckets`), from above.
    static let bucketCost = FleetMemory.dictionary(count: 1, String.self, [JobEnd: Int].self)
        + (MemoryLayout<Int64>.stride + MemoryLayout<[String: [JobEnd: Int]]>.stride) * 8 / 3
        + FleetMemory.endCounts + (MemoryLayout<Int64>.stride + MemoryLayout<[JobEnd: Int]>.stride) * 8 / 3
    static func slotCost(_ bundleID: String) -> Int {
        FleetMemory.string(bundleID) + FleetMemory.endCounts + (MemoryLayout<String>.stride + MemoryLayout<[JobEnd: Int]>.stride) * 8 / 3
    }

    /// The highest rate a point shows, in jobs per second: 2^53, the largest count a heartbeat
    /// carries. Sums of forged counts over 1,000 bundles pass `Int.max`; a rate stops here, so
    /// everything drawn from it (the axis, its labels) stays a finite number an `Int` holds.
    public static let maxPerSecond = Double(UntrustedText.maxCount)

    public init(bucketSeconds: Int = 10, windowSeconds: Int = 15 * 60) {
        self.bucketSeconds = max(bucketSeconds, 1)
        self.windowSeconds = max(windowSeconds, self.bucketSeconds)
    }

    public var bucketCount: Int { windowSeconds / bucketSeconds }

    /// What bundles' own slots may take of `maxBytes`: the rest is kept for what is always
    /// allowed, every bucket of the window (and the one being filled) with its `otherBundles`.
    var bundleBudget: Int { Self.maxBytes - (bucketCount + 1) * (Self.bucketCost + Self.slotCost(Self.otherBundles)) }

    func bucket(of date: Date) -> Int64 { Int64((date.timeIntervalSince1970 / Double(bucketSeconds)).rounded(.down)) }

    public mutating func record(instance: String, counts: [String: [JobEnd: Int]], at now: Date) {
        defer { baselines[instance] = counts }
        guard let previous = baselines[instance] else { return }
        let index = bucket(of: now)
        // Taken out while it is filled, so the dictionary is not copied for every heartbeat.
        var slot = buckets.removeValue(forKey: index) ?? [:]
        var fleet = fleetBuckets.removeValue(forKey: index) ?? [:]
        var cost = bucketBytes[index] ?? Self.bucketCost
        // Bounded memory whatever the heartbeats claim: past `maxBundlesPerBucket` bundles in one
        // bucket, or `maxBytes` in all, the work still counts fleet-wide, under `otherBundles`
        // (one slot per bucket, always allowed). A bundle takes a slot only once it did work.
        func place(_ bundleID: String) -> String {
            if slot[bundleID] != nil { return bundleID }
            let added = Self.slotCost(bundleID)
            if slot.count < Self.maxBundlesPerBucket, bytes - (bucketBytes[index] ?? 0) + cost + added <= bundleBudget {
                cost += added
                return bundleID
            }
            if slot[Self.otherBundles] == nil { cost += Self.slotCost(Self.otherBundles) }
            return Self.otherBundles
        }
        for (bundleID, ends) in counts {
            var key: String?
            for (end, count) in ends {
                // Counts only grow within one process; a smaller one is treated as a fresh start.
                // Overflow-checked: the counts come from outside (FleetView checks them first,
                // but this type must not trap on any input).
                let (delta, overflow) = count.subtractingReportingOverflow(previous[bundleID]?[end] ?? 0)
                guard delta > 0, !overflow else { continue }
                let slotKey = key ?? place(bundleID)
                key = slotKey
                let sum = slot[slotKey]?[end] ?? 0
                slot[slotKey, default: [:]][end] = sum.saturatingAdd(delta)
                fleet[end] = fleet[end, default: 0].saturatingAdd(delta)
            }
        }
        buckets[index] = slot
        fleetBuckets[index] = fleet
        bytes += cost - (bucketBytes[index] ?? 0)
        bucketBytes[index] = cost
        let oldest = index - Int64(bucketCount)
        for old in bucketBytes.keys where old <= oldest {
            bytes -= bucketBytes.removeValue(forKey: old) ?? 0
            buckets[old] = nil
            fleetBuckets[old] = nil
        }
    }

    public mutating func forget(instance: String) {
        baselines[instance] = nil
    }

    /// One point per bucket, oldest first.
    public struct Point: Sendable, Hashable {
        public var start: Date
        /// Jobs per second by end.
        public var perSecond: [JobEnd: Double]

        public init(start: Date, perSecond: [JobEnd: Double]) {
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
            // Summed as saturating integers, then capped: a Double sum of 1,001 slots each near
            // `Int.max` is finite but no longer an `Int`, and the graph converts it.
            let jobs = self.jobs(in: index, bundleID: bundleID)
            var perSecond: [JobEnd: Double] = [:]
            for end in JobEnd.fleetEnds {
                perSecond[end] = min(Double(jobs[end, default: 0]) / Double(bucketSeconds), Self.maxPerSecond)
            }
            return Point(start: Date(timeIntervalSince1970: Double(index) * Double(bucketSeconds)), perSecond: perSecond)
        }
    }

    /// Jobs of one bundle (or all) by end in the last `seconds` (whole buckets), for the per-minute rates.
    public func recent(now: Date, seconds: Int = 60, bundleID: String? = nil) -> [JobEnd: Int] {
        let last = bucket(of: now)
        let span = Int64(max(1, seconds / bucketSeconds))
        var total: [JobEnd: Int] = [:]
        for end in JobEnd.fleetEnds { total[end] = 0 }
        for index in (last - span + 1)...last {
            for (end, count) in jobs(in: index, bundleID: bundleID) { total[end] = total[end, default: 0].saturatingAdd(count) }
        }
        return total
    }

    /// One bucket's jobs by end, of one bundle (looked up, not searched: the page asks for many
    /// bundles), or of every bundle (the running total, not a sum over the bucket's bundles).
    private func jobs(in index: Int64, bundleID: String?) -> [JobEnd: Int] {
        guard let bundleID else { return fleetBuckets[index] ?? [:] }
        return buckets[index]?[bundleID] ?? [:]
    }

    /// Every bundle's jobs of all four ends in the last `seconds` (whole buckets): how busy each
    /// bundle is now, for the page's choice of the bundles it draws. At most
    /// `maxBundlesPerBucket` entries a bucket (work past it counts under `otherBundles`).
    public func recentJobsByBundle(now: Date, seconds: Int = 60) -> [String: Int] {
        let last = bucket(of: now)
        let span = Int64(max(1, seconds / bucketSeconds))
        var jobs: [String: Int] = [:]
        for index in (last - span + 1)...last {
            for (bundleID, ends) in buckets[index] ?? [:] where bundleID != Self.otherBundles {
                jobs[bundleID] = ends.values.reduce(jobs[bundleID, default: 0]) { $0.saturatingAdd($1) }
            }
        }
        return jobs
    }
}

