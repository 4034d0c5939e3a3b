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
        public var end: JobEndKind

        public init(bundleID: String, hour: Int64, end: JobEndKind) {
            self.bundleID = bundleID
            self.hour = hour
            self.end = end
        }

        public static func < (a: Key, b: Key) -> Bool {
            (a.bundleID, a.hour, a.end.rawValue) < (b.bundleID, b.hour, b.end.rawValue)
        }
    }

    public private(set) var counts: [Key: Int64] = [:]

    public init() {}

    public var isEmpty: Bool { counts.isEmpty }

    /// The start of the UTC hour holding `epochSeconds`.
    public static func hour(ofEpochSeconds epochSeconds: Int64) -> Int64 {
        epochSeconds - ((epochSeconds % 3600) + 3600) % 3600
    }

    public mutating func add(bundleID: String, end: JobEndKind, epochSeconds: Int64, count: Int64 = 1) {
        counts[Key(bundleID: bundleID, hour: Self.hour(ofEpochSeconds: epochSeconds), end: end), default: 0] += count
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
