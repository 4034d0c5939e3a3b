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

    private var instances: [String: FleetInstance] = [:]
    public private(set) var rates: FleetRates
    /// What the view did not keep since it was made (shown in `GET /api/fleet`).
    public private(set) var dropped = FleetDrops()

    public init(rates: FleetRates = FleetRates()) {
        self.rates = rates
    }

    /// What became of one heartbeat.
    public enum Admission: Sendable, Hashable {
        /// Kept whole.
        case kept
        /// Kept, without its bundles beyond the first 1,000 (by bundle ID).
        case keptDroppingBundles(Int)
        /// A new instance while 1,000 are kept: not kept (the instances already known stay).
        case droppedInstance
        /// Not well formed (`FleetInstance.isWellFormed`): ignored.
        case ignored
    }

    /// Takes a heartbeat heard at `now` (the receiver's clock, so senders' clocks may be skewed).
    /// A new instance is turned away while the view is full rather than pushing out one it
    /// knows: a forger can make up ids faster than real instances beat, so eviction would let
    /// forged instances push the real ones out; a full view of forged ones empties itself within
    /// three of their intervals (at most 15 minutes).
    @discardableResult
    public mutating func received(_ heartbeat: FleetInstance, at now: Date) -> Admission {
        guard heartbeat.isWellFormed else {
            dropped.ignored = dropped.ignored.saturatingAdd(1)
            return .ignored
        }
        guard instances[heartbeat.id] != nil || instances.count < Self.maxInstances else {
            dropped.instances = dropped.instances.saturatingAdd(1)
            return .droppedInstance
        }
        var instance = heartbeat
        instance.lastSeen = now
        var admission = Admission.kept
        let excess = instance.bundles.count - Self.maxBundlesPerInstance
        if excess > 0 {
            let kept = instance.bundles.keys.sorted().prefix(Self.maxBundlesPerInstance)
            instance.bundles = Dictionary(uniqueKeysWithValues: kept.map { ($0, instance.bundles[$0]!) })
            dropped.bundles = dropped.bundles.saturatingAdd(excess)
            admission = .keptDroppingBundles(excess)
        }
        instances[instance.id] = instance
        rates.record(instance: instance.id, counts: instance.bundles.mapValues { bundle in
            Dictionary(uniqueKeysWithValues: FleetEnd.allCases.map { ($0, bundle.count($0)) })
        }, at: now)
        return admission
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
    /// held fleet-wide when any instance holds it).
    public func totals(now: Date) -> [String: FleetInstance.Bundle] {
        var totals: [String: FleetInstance.Bundle] = [:]
        for instance in live(now: now) {
            for (bundleID, bundle) in instance.bundles {
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
