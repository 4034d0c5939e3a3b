import Foundation

/// What one listener knows of the fleet: the latest heartbeat of every instance, forgetting an
/// instance silent for three of its intervals, plus the jobs-per-second history of the graph.
/// Pure: time comes in as `Date`, so tests drive it without a broker.
public struct FleetView: Sendable {
    /// Silent this many heartbeat intervals, an instance is gone (contract §5: three).
    public static let silentIntervals = 3.0

    private var instances: [String: FleetInstance] = [:]
    public private(set) var rates: FleetRates

    public init(rates: FleetRates = FleetRates()) {
        self.rates = rates
    }

    /// Takes a heartbeat heard at `now` (the receiver's clock, so senders' clocks may be skewed).
    public mutating func received(_ heartbeat: FleetInstance, at now: Date) {
        var instance = heartbeat
        instance.lastSeen = now
        instances[instance.id] = instance
        rates.record(instance: instance.id, counts: instance.bundles.mapValues { bundle in
            Dictionary(uniqueKeysWithValues: FleetEnd.allCases.map { ($0, bundle.count($0)) })
        }, at: now)
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
                var sum = totals[bundleID, default: FleetInstance.Bundle()]
                sum.delivered += bundle.delivered
                sum.invalidToken += bundle.invalidToken
                sum.retry += bundle.retry
                sum.dead += bundle.dead
                sum.gated += bundle.gated
                sum.inFlight += bundle.inFlight
                sum.held = sum.held || bundle.held
                sum.paused = sum.paused || bundle.paused
                for (state, count) in bundle.connections { sum.connections[state, default: 0] += count }
                if let taken = bundle.lastTakenPublishedAt, taken > (sum.lastTakenPublishedAt ?? .distantPast) {
                    sum.lastTakenPublishedAt = taken
                }
                totals[bundleID] = sum
            }
        }
        return totals
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
