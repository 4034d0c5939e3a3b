import APNSModel

/// Counts of job ends per bundle ID, UTC hour and end, gathered in memory between flushes
/// (contract §6). Pure: the hour comes from the caller's clock. A failed flush merges its batch
/// back, so nothing is lost while the registry is down; the key space (bundles × hours × ends)
/// keeps it small.
public struct CountAggregator: Sendable, Hashable {
    public struct Key: Sendable, Hashable, Comparable {
        public var bundleID: String
        /// The hour's start, seconds since the epoch (a multiple of 3600).
        public var hour: Int64
        /// The end's `contractName`, as stored in `apns_counts.end_kind`.
        public var end: String

        /// The key of a counted end; nil for `held`, which the registry does not count.
        public init?(bundleID: String, hour: Int64, end: JobEnd) {
            guard let name = end.contractName else { return nil }
            self.bundleID = bundleID
            self.hour = hour
            self.end = name
        }

        public static func < (a: Key, b: Key) -> Bool {
            (a.bundleID, a.hour, a.end) < (b.bundleID, b.hour, b.end)
        }
    }

    public private(set) var counts: [Key: Int64] = [:]

    public init() {}

    public var isEmpty: Bool { counts.isEmpty }

    /// The start of the UTC hour holding `epochSeconds`.
    public static func hour(ofEpochSeconds epochSeconds: Int64) -> Int64 {
        epochSeconds - ((epochSeconds % 3600) + 3600) % 3600
    }

    /// Counts `count` ends; a `held` job has not ended and is not counted.
    public mutating func add(bundleID: String, end: JobEnd, epochSeconds: Int64, count: Int64 = 1) {
        guard let key = Key(bundleID: bundleID, hour: Self.hour(ofEpochSeconds: epochSeconds), end: end) else { return }
        counts[key, default: 0] += count
    }

    /// Everything gathered so far, emptied: the batch to write.
    public mutating func take() -> [Key: Int64] {
        defer { counts = [:] }
        return counts
    }

    /// A batch whose write failed, added back.
    public mutating func merge(_ batch: [Key: Int64]) {
        for (key, count) in batch { counts[key, default: 0] += count }
    }
}
