/// How many jobs each bundle's consumer takes when bundles share a connection pool.
/// A pool carries `connections` × the streams a connection allows at once; a job taken beyond
/// that waits for a stream, and one that waits past its request deadline is a timeout, retried
/// and at last dead for no fault of its own. Per bundle that never happened (2 × 1,000 streams
/// against a prefetch of at most 500), but a thousand bundles of one team at the budget's floor
/// of 32 would hold 32,000 jobs against one pool's 2,000 streams. So the bundles of a pool split
/// its streams: each takes the smaller of its budget share and its part of the pool. (The in-flight
/// window sizes this to the measured round trip; this is the bound it starts under.) Pure.
public enum PoolPrefetch {
    public struct Member: Sendable, Hashable {
        public var bundleID: String
        public var key: TransportPoolKey
        public var connections: Int

        public init(bundleID: String, key: TransportPoolKey, connections: Int) {
            self.bundleID = bundleID
            self.key = key
            self.connections = connections
        }
    }

    /// Each bundle's prefetch, by bundle ID, from the pool of its default environment.
    /// - Parameters:
    ///   - share: the budget's prefetch per bundle (`InFlightBudget.share(bundles:).perBundle`).
    ///   - streamsPerConnection: the most streams a connection carries at once (ours; Apple's
    ///     own limit is no higher).
    /// - Returns: at least 1 each; binary pools (one bundle each, no streams) keep `share`.
    public static func prefetches(_ members: [Member], share: Int, streamsPerConnection: Int) -> [String: Int] {
        var byKey: [TransportPoolKey: [Member]] = [:]
        for member in members { byKey[member.key, default: []].append(member) }
        var prefetch: [String: Int] = [:]
        for (key, pool) in byKey {
            if case .binary = key.credential {
                for member in pool { prefetch[member.bundleID] = share }
                continue
            }
            // The pool's connections are its first bundle's (`TransportPools`).
            let streams = max(1, pool[0].connections) * max(1, streamsPerConnection)
            let part = max(1, streams / pool.count)
            for member in pool { prefetch[member.bundleID] = min(share, part) }
        }
        return prefetch
    }
}
