/// Whether a resource keeps growing: a least-squares slope over the judged samples, not a
/// threshold on any one of them. Pure.
///
/// The fit gives each group (an epoch between broker restarts) an intercept of its own and one
/// slope for all: the pooled within-group slope, Σ(t − t̄ₑ)(y − ȳₑ) / Σ(t − t̄ₑ)². A restart
/// closes every channel and socket the worker had, so a leak shows as a saw-tooth whose teeth a
/// single line through all samples would flatten; within each epoch it is a rising line.
public struct TrendPoint: Sendable, Hashable {
    public var seconds: Double
    public var value: Double
    public var group: Int

    public init(seconds: Double, value: Double, group: Int) {
        self.seconds = seconds
        self.value = value
        self.group = group
    }
}

/// How much growth a resource may show over the judged samples, and why (kept with the verdict).
public struct TrendTolerance: Sendable, Hashable {
    /// The most the fitted line may rise from the first judged sample to the last.
    public var growth: Double
    public var reason: String

    public init(growth: Double, reason: String) {
        self.growth = growth
        self.reason = reason
    }

    /// Counted objects (channels, connections, descriptors, threads, jobs in flight) are exact at
    /// rest; `slack` of them may differ between two quiet samples because one was caught while
    /// something settled (a consumer re-opening its channel, a connection re-dialled after its
    /// GOAWAY). A leak of one per cycle rises by one per cycle: past the slack after a few cycles.
    public static func count(slack: Double, _ reason: String) -> TrendTolerance {
        TrendTolerance(growth: slack, reason: reason)
    }

    /// Resident memory: glibc keeps freed memory in its arenas and gives it back in steps, and
    /// the first hour's fragmentation settles in megabytes; `fraction` of the first judged value,
    /// at least `floor` MiB.
    public static func memory(floorMiB floor: Double, fraction: Double, first: Double) -> TrendTolerance {
        TrendTolerance(
            growth: max(floor, first * fraction),
            reason: "resident memory moves in allocator steps; \(Int(fraction * 100))% of the first judged value, at least \(Int(floor)) MiB")
    }
}

public struct TrendVerdict: Sendable, Hashable {
    public var resource: String
    /// Per hour, from the fit; nil when no epoch had two judged samples at different times.
    public var slopePerHour: Double?
    /// The fitted rise from the first judged sample to the last: slope × their distance.
    public var growth: Double
    public var tolerance: TrendTolerance
    public var samples: Int

    public var isGrowing: Bool { growth > tolerance.growth }

    /// One line: the resource, its slope and growth, and the verdict.
    public var line: String {
        let slope = slopePerHour.map { format($0) + "/h" } ?? "none (too few judged samples)"
        return "\(resource): slope \(slope), grew \(format(growth)) over \(samples) judged samples (tolerance \(format(tolerance.growth)): "
            + (isGrowing ? "GROWING)" : "flat)")
    }

    private func format(_ value: Double) -> String {
        let rounded = (value * 100).rounded() / 100
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
    }
}

public enum ResourceTrend {
    /// The pooled within-group least-squares slope (value per second); nil when no group has two
    /// samples at different times.
    public static func pooledSlope(_ points: [TrendPoint]) -> Double? {
        var byGroup: [Int: [TrendPoint]] = [:]
        for point in points { byGroup[point.group, default: []].append(point) }
        var numerator = 0.0
        var denominator = 0.0
        for group in byGroup.values {
            let n = Double(group.count)
            let meanT = group.reduce(0) { $0 + $1.seconds } / n
            let meanY = group.reduce(0) { $0 + $1.value } / n
            for point in group {
                numerator += (point.seconds - meanT) * (point.value - meanY)
                denominator += (point.seconds - meanT) * (point.seconds - meanT)
            }
        }
        return denominator > 0 ? numerator / denominator : nil
    }

    public static func judge(_ resource: String, _ points: [TrendPoint], tolerance: TrendTolerance) -> TrendVerdict {
        let slope = pooledSlope(points)
        let times = points.map(\.seconds)
        let span = (times.max() ?? 0) - (times.min() ?? 0)
        return TrendVerdict(
            resource: resource, slopePerHour: slope.map { $0 * 3600 }, growth: (slope ?? 0) * span, tolerance: tolerance,
            samples: points.count)
    }
}
