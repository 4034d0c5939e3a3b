/// What a soak does to a worker and when (`apns-worker-bench soak`), as a value: the events of a
/// long life packed into a repeating cycle, and which moments of the run may judge accumulation.
/// Pure: the bench carries the events out and asks this where a sample falls.
///
/// A normal cycle holds the bundles on a refused key, refuses one topic, pauses a bundle, reloads
/// the configuration twice (a bundle removed and a key rotated, then both back, so that every
/// quiet part runs the same configuration) and sends GOAWAYs and drops to APNs, then leaves the
/// last part of the cycle quiet. Every `restartEvery`-th cycle restarts the broker while a key is refused (a held bundle
/// probing through an outage) and nothing else. Only the quiet part of normal cycles after the
/// warm-up is judged: a sample taken mid-event measures the event (a held consumer, connections
/// re-dialled), not what stays behind; and a broker restart closes every channel, so the channels
/// a leak left are counted anew from zero in each epoch between restarts.
public enum SoakAction: String, Sendable, Hashable, CaseIterable {
    /// APNs answers every request 403 `InvalidProviderToken` (a revoked key), and again accepts.
    case refuseKey, allowKey
    /// APNs answers the soak's `.voip` job 400 `TopicDisallowed` (a key without the topic),
    /// and again accepts it; the bench publishes one such job when the refusal starts.
    case refuseTopic, allowTopic
    /// `apns-worker pause --bundle` and `resume --bundle` of one bundle.
    case pause, resume
    /// The configuration rewritten (a bundle added or removed, a credential rotated), then SIGHUP.
    case reload
    /// The broker node stopped, and started again.
    case stopBroker, startBroker
    /// APNs connections end by GOAWAY, then abruptly, then no more.
    case goaway, dropConnections, healAPNs
}

public struct SoakEvent: Sendable, Hashable {
    /// From the start of the run.
    public var at: Duration
    public var action: SoakAction
    public var cycle: Int

    public init(at: Duration, action: SoakAction, cycle: Int) {
        self.at = at
        self.action = action
        self.cycle = cycle
    }
}

public struct SoakSchedule: Sendable, Hashable {
    public var duration: Duration
    public var cycle: Duration
    /// Every this many cycles, the last is a broker restart cycle; 0: never.
    public var restartEvery: Int
    /// Cycles at the start that are not judged (connections, pools and caches filling).
    public var warmUpCycles: Int

    /// Where each event of a normal cycle falls, as a fraction of the cycle: each state lasts long
    /// enough for jobs at a few a second to meet it, and everything is undone by `quietFrom`.
    public static let normalCycle: [(fraction: Double, action: SoakAction)] = [
        (0.00, .refuseKey), (0.08, .allowKey),
        (0.12, .refuseTopic), (0.22, .allowTopic),
        (0.26, .pause), (0.36, .resume),
        (0.40, .reload), (0.46, .reload),
        (0.50, .goaway), (0.55, .dropConnections), (0.60, .healAPNs),
    ]
    /// A restart cycle: the key refused across the outage, so that held bundles probe through it.
    public static let restartCycle: [(fraction: Double, action: SoakAction)] = [
        (0.00, .refuseKey), (0.05, .stopBroker), (0.10, .startBroker), (0.60, .allowKey),
    ]
    /// The quiet part of a normal cycle starts here.
    public static let quietFrom = 0.65

    public init(duration: Duration, cycle: Duration, restartEvery: Int, warmUpCycles: Int) {
        self.duration = duration
        self.cycle = cycle
        self.restartEvery = restartEvery
        self.warmUpCycles = warmUpCycles
    }

    public var cycleCount: Int { Int((duration / cycle).rounded(.up)) }

    public func isRestartCycle(_ index: Int) -> Bool {
        restartEvery > 0 && index % restartEvery == restartEvery - 1
    }

    /// Every event before the end of the run, in order. A cycle cut by the end keeps the events
    /// that fall before it; the bench undoes whatever is left on at the end.
    public var events: [SoakEvent] {
        var events: [SoakEvent] = []
        for index in 0..<cycleCount {
            let start = cycle * index
            for (fraction, action) in isRestartCycle(index) ? Self.restartCycle : Self.normalCycle {
                let at = start + cycle * fraction
                if at < duration { events.append(SoakEvent(at: at, action: action, cycle: index)) }
            }
        }
        return events
    }

    public func cycleIndex(at time: Duration) -> Int { max(0, Int(time / cycle)) }

    /// Broker restarts begun before `time`'s cycle: samples of one epoch share a broker connection.
    public func epoch(at time: Duration) -> Int {
        restartEvery > 0 ? cycleIndex(at: time) / restartEvery : 0
    }

    /// Whether a sample taken at `time` may judge accumulation: the quiet part of a normal cycle
    /// after the warm-up, before the end of the run.
    public func isJudged(at time: Duration) -> Bool {
        let index = cycleIndex(at: time)
        guard time < duration, index >= warmUpCycles, !isRestartCycle(index) else { return false }
        return time - cycle * index >= cycle * Self.quietFrom
    }

    /// What a sample at `time` is, for the CSV and the plot: `warm-up`, `restart`, `quiet`, `events`.
    public func phase(at time: Duration) -> String {
        let index = cycleIndex(at: time)
        if index < warmUpCycles { return "warm-up" }
        if isRestartCycle(index) { return "restart" }
        return isJudged(at: time) ? "quiet" : "events"
    }

    /// The configuration after `reloads` reloads: the spare bundle is configured at the start and
    /// after an even number of reloads (each reload removes or adds it), and the rotated bundle
    /// signs with the second key after an odd number (each reload rotates its credential).
    public static func configuration(afterReloads reloads: Int) -> (spareConfigured: Bool, rotatedKeyIndex: Int) {
        (reloads % 2 == 0, reloads % 2)
    }
}

/// `90s`, `5m`, `1h`, `1h30m`, `250ms`: the soak's durations on the command line.
public enum SoakDuration {
    public static func parse(_ text: String) -> Duration? {
        var total = Duration.zero
        var digits = ""
        var rest = Substring(text)
        guard !rest.isEmpty else { return nil }
        while let character = rest.first {
            if character.isASCII, character.isNumber {
                digits.append(character)
                rest = rest.dropFirst()
                continue
            }
            guard let value = Int(digits) else { return nil }
            digits = ""
            if rest.hasPrefix("ms") {
                total += .milliseconds(value)
                rest = rest.dropFirst(2)
            } else {
                let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600]
                guard let seconds = units[character] else { return nil }
                total += .seconds(value * seconds)
                rest = rest.dropFirst()
            }
        }
        return digits.isEmpty ? total : nil
    }
}
