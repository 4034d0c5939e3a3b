import APNSModel
import Foundation

/// What one listener knows of the fleet: the latest heartbeat of every instance, forgetting an
/// instance silent for three of its intervals, plus the jobs-per-second history of the graph.
/// Pure: time comes in as `Date`, so tests drive it without a broker.
public struct FleetView: Sendable {
    /// Silent this many heartbeat intervals, an instance is gone (contract §5: three).
    public static let silentIntervals = 3.0

    /// Contract §5: the view keeps at most this many instances, and this many bundles of each.
    public static let maxInstances = 1000
    public static let maxBundlesPerInstance = 1000
    /// Contract §5: at most 16 MiB in all.
    public static let maxBytes = 16 << 20
    /// What the view's own estimate (`bytes`) may reach: three quarters of `maxBytes`, the rest
    /// left for what the estimate does not see (malloc's rounding, the heap's fragmentation):
    /// measured with `apns-worker-bench attack view`, resident memory grew 16.4 MiB for an
    /// estimate of 12.0. The instances with their bundles and rates baselines get
    /// `maxInstanceBytes`, the graph's history (`FleetRates.maxBytes`) the rest.
    public static let accountedBytes = maxBytes / 4 * 3
    public static let maxInstanceBytes = accountedBytes - FleetRates.maxBytes

    private var instances: [String: FleetInstance] = [:]
    /// What each kept instance costs (`FleetMemory`), and their sum.
    private var costs: [String: Int] = [:]
    public private(set) var instanceBytes = 0
    public private(set) var rates: FleetRates
    /// What the view did not keep since it was made (shown in `GET /api/fleet`).
    public private(set) var dropped = FleetDrops()

    /// The listener's own instance: a place for it is kept while it is not in the view, so
    /// forged heartbeats that fill the view (anyone on the vhost can send 1,000 made-up
    /// instances) cannot keep an instance out of its own view, page and `GET /api/fleet`.
    public let ownInstanceID: String?
    /// The bytes kept for the own instance while it is out: more than a heartbeat of 1,000
    /// bundles with 155-byte IDs costs (`FleetViewOwnSlotTests`).
    public static let ownReserveBytes = 1 << 20

    public init(rates: FleetRates = FleetRates(), reservedFor ownInstanceID: String? = nil) {
        self.rates = rates
        self.ownInstanceID = ownInstanceID
    }

    /// The view's memory as `FleetMemory` estimates it: at most `accountedBytes`.
    public var bytes: Int { instanceBytes + rates.bytes }

    /// What became of one heartbeat.
    public enum Admission: Sendable, Hashable {
        /// Kept whole.
        case kept
        /// Kept, without this many of its bundles: those beyond the first 1,000 (by bundle ID),
        /// or beyond what fits in the view's bytes.
        case keptDroppingBundles(Int)
        /// A new instance while 1,000 are kept, or while the view's bytes leave no room for it:
        /// not kept (the instances already known stay).
        case droppedInstance
        /// Not well formed (`FleetInstance.isWellFormed`): ignored.
        case ignored
    }

    /// Takes a heartbeat heard at `now` (the receiver's clock, so senders' clocks may be skewed).
    /// A new instance is turned away while the view is full rather than pushing out one it
    /// knows: a forger can make up ids faster than real instances beat, so eviction would let
    /// forged instances push the real ones out; a full view of forged ones empties itself within
    /// three of their intervals (at most 15 minutes). Full means 1,000 instances, or bytes: an
    /// instance's first bundles (by bundle ID) are kept as far as they fit in `maxInstanceBytes`
    /// (with what it cost before given back), the rest counted as dropped.
    @discardableResult
    public mutating func received(_ heartbeat: FleetInstance, at now: Date) -> Admission {
        guard heartbeat.isWellFormed else {
            dropped.ignored = dropped.ignored.saturatingAdd(1)
            return .ignored
        }
        let previousCost = costs[heartbeat.id]
        // Another new instance leaves the own instance's place free until it is in.
        let reserving = previousCost == nil && ownInstanceID.map { $0 != heartbeat.id && instances[$0] == nil } == true
        guard previousCost != nil || instances.count < Self.maxInstances - (reserving ? 1 : 0) else {
            dropped.instances = dropped.instances.saturatingAdd(1)
            return .droppedInstance
        }
        let room = Self.maxInstanceBytes - (instanceBytes - (previousCost ?? 0)) - (reserving ? Self.ownReserveBytes : 0)
        guard FleetMemory.instance(heartbeat, bundles: 0, bundleBytes: 0) <= room else {
            // Only a new instance can meet this: a known one's previous cost is room enough.
            dropped.instances = dropped.instances.saturatingAdd(1)
            return .droppedInstance
        }
        var instance = heartbeat
        instance.lastSeen = now
        for (bundleID, bundle) in instance.bundles where bundle.lastTakenPublishedAt != nil {
            instance.bundles[bundleID]?.lastTakenPublishedAt = QueueLatency.believable(bundle.lastTakenPublishedAt, now: now)
        }
        let (kept, cost) = Self.bundlesThatFit(heartbeat, room: room)
        let excess = heartbeat.bundles.count - kept.count
        var admission = Admission.kept
        if excess > 0 {
            instance.bundles = Dictionary(uniqueKeysWithValues: kept.map { ($0, heartbeat.bundles[$0]!) })
            dropped.bundles = dropped.bundles.saturatingAdd(excess)
            admission = .keptDroppingBundles(excess)
        }
        instances[instance.id] = instance
        costs[instance.id] = cost
        instanceBytes += cost - (previousCost ?? 0)
        rates.record(instance: instance.id, counts: instance.bundles.mapValues { bundle in
            Dictionary(uniqueKeysWithValues: JobEnd.fleetEnds.map { ($0, bundle.count($0)) })
        }, at: now)
        return admission
    }

    /// The bundles of `heartbeat` the view keeps, all of them when they fit, else its first
    /// ones by bundle ID: at most `maxBundlesPerInstance`, and the instance within `room` bytes.
    static func bundlesThatFit(_ heartbeat: FleetInstance, room: Int) -> (keys: [String], cost: Int) {
        if heartbeat.bundles.count <= maxBundlesPerInstance {
            let bytes = heartbeat.bundles.reduce(0) { $0 + FleetMemory.bundle(key: $1.key, $1.value) }
            let cost = FleetMemory.instance(heartbeat, bundles: heartbeat.bundles.count, bundleBytes: bytes)
            if cost <= room { return (Array(heartbeat.bundles.keys), cost) }
        }
        var keys: [String] = []
        var bytes = 0
        var cost = FleetMemory.instance(heartbeat, bundles: 0, bundleBytes: 0)
        for key in heartbeat.bundles.keys.sorted().prefix(maxBundlesPerInstance) {
            let more = bytes + FleetMemory.bundle(key: key, heartbeat.bundles[key]!)
            let next = FleetMemory.instance(heartbeat, bundles: keys.count + 1, bundleBytes: more)
            guard next <= room else { break }
            keys.append(key)
            bytes = more
            cost = next
        }
        return (keys, cost)
    }

    /// Counts a message on the fleet exchange that did not decode (not one of ours, or not well formed).
    public mutating func ignoredMessage() {
        dropped.ignored = dropped.ignored.saturatingAdd(1)
    }

    /// Forgets instances silent for three of their intervals; returns their ids.
    @discardableResult
    public mutating func expire(now: Date) -> [String] {
        let gone = instances.values.filter { Self.isSilent($0, now: now) }.map(\.id).sorted()
        for id in gone {
            instances[id] = nil
            instanceBytes -= costs.removeValue(forKey: id) ?? 0
            rates.forget(instance: id)
        }
        return gone
    }

    /// The longest interval `[admin] heartbeatInterval` allows: a heartbeat claiming more (any
    /// client of the vhost can publish one) is not kept longer than a real instance would be.
    public static let longestInterval = 300.0

    static func isSilent(_ instance: FleetInstance, now: Date) -> Bool {
        guard let seen = instance.lastSeen else { return true }
        let interval = min(max(instance.heartbeatInterval, 0.001), longestInterval)
        return now.timeIntervalSince(seen) > interval * silentIntervals
    }

    /// The live instances at `now`, by host, then pid, then id.
    public func live(now: Date) -> [FleetInstance] {
        instances.values.filter { !Self.isSilent($0, now: now) }.sorted {
            ($0.host, $0.pid, $0.id) < ($1.host, $1.pid, $1.id)
        }
    }

    /// Every live instance's counts summed per bundle (in-flight and held included: a bundle is
    /// held fleet-wide when any instance holds it); with `only`, of those bundles alone (the page
    /// sums the bundles it draws, not every bundle a forged view holds).
    public func totals(now: Date, only: Set<String>? = nil) -> [String: FleetInstance.Bundle] {
        var totals: [String: FleetInstance.Bundle] = [:]
        for instance in instances.values where !Self.isSilent(instance, now: now) {
            for (bundleID, bundle) in instance.bundles where only?.contains(bundleID) ?? true {
                // Saturating: the counts come from outside (bounded by 2^53 each, but summed).
                var sum = totals[bundleID, default: FleetInstance.Bundle()]
                sum.delivered = sum.delivered.saturatingAdd(bundle.delivered)
                sum.invalidToken = sum.invalidToken.saturatingAdd(bundle.invalidToken)
                sum.retry = sum.retry.saturatingAdd(bundle.retry)
                sum.dead = sum.dead.saturatingAdd(bundle.dead)
                sum.gated = sum.gated.saturatingAdd(bundle.gated)
                sum.inFlight = sum.inFlight.saturatingAdd(bundle.inFlight)
                sum.held = sum.held || bundle.held
                sum.paused = sum.paused || bundle.paused
                for (state, count) in bundle.connections {
                    sum.connections[state] = sum.connections[state, default: 0].saturatingAdd(count)
                }
                if let taken = bundle.lastTakenPublishedAt, taken > (sum.lastTakenPublishedAt ?? .distantPast) {
                    sum.lastTakenPublishedAt = taken
                }
                totals[bundleID] = sum
            }
        }
        return totals
    }
}

/// What a `FleetView` did not keep (contract §5: it says when it drops any), counted since the
/// view was made.
public struct FleetDrops: Sendable, Hashable, Codable {
    /// Heartbeats of new instances turned away while 1,000 were kept.
    public var instances = 0
    /// Bundles beyond an instance's first 1,000, summed over heartbeats.
    public var bundles = 0
    /// Heartbeats that were not well formed (forged, damaged, counts out of range).
    public var ignored = 0

    public init(instances: Int = 0, bundles: Int = 0, ignored: Int = 0) {
        self.instances = instances
        self.bundles = bundles
        self.ignored = ignored
    }
}

/// How old the oldest ready job of a work queue is, estimated without touching the queue.
///
/// RabbitMQ cannot peek, and taking the head job to read its timestamp counts as a delivery
/// (quorum queues raise `x-delivery-count`; a page refreshed for an hour over a paused bundle
/// would turn its head job into a poison job). The queue is FIFO, so the oldest ready job was
/// published no earlier than the newest job any instance took: while consumers take jobs that
/// is the age, and with none it is an upper bound.
public enum QueueLatency: Sendable, Hashable {
    /// Nothing is ready.
    case empty
    /// About this old (jobs are being taken).
    case about(Duration)
    /// At most this old (nobody takes jobs: paused, held or no instance).
    case atMost(Duration)
    /// Jobs are ready, but no taken job carried a timestamp.
    case unknown

    /// How far past the reader's clock a publish time is still believed (publishers' clocks
    /// drift). The newest publish time taken is kept, so a later one would stick: a job stamped
    /// `UInt64.max` seconds (or a forged heartbeat) made every estimate read 0 s for good.
    public static let futureTolerance: TimeInterval = 300

    /// `publishedAt` when it is no later than `now` + `futureTolerance`, else nil (unknown).
    public static func believable(_ publishedAt: Date?, now: Date) -> Date? {
        guard let publishedAt, publishedAt.timeIntervalSince(now) <= futureTolerance else { return nil }
        return publishedAt
    }

    public static func estimate(ready: Int, consumers: Int, lastTakenPublishedAt: Date?, now: Date) -> QueueLatency {
        guard ready > 0 else { return .empty }
        guard let published = lastTakenPublishedAt else { return .unknown }
        let age = Duration.milliseconds(Int64(max(0, now.timeIntervalSince(published)) * 1000))
        return consumers > 0 ? .about(age) : .atMost(age)
    }

    /// `0 s`, `≈ 42 s`, `≤ 3 min`, `unknown`.
    public var text: String {
        switch self {
        case .empty: "0 s (empty)"
        case .about(let age): "≈ \(Self.format(age))"
        case .atMost(let age): "≤ \(Self.format(age))"
        case .unknown: "unknown (jobs carry no timestamp)"
        }
    }

    static func format(_ age: Duration) -> String {
        let seconds = age.milliseconds / 1000
        if seconds < 120 { return "\(seconds) s" }
        if seconds < 7200 { return "\(seconds / 60) min" }
        return "\(seconds / 3600) h"
    }
}
