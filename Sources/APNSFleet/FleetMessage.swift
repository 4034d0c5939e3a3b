import APNSModel
import Foundation

/// What instances tell each other on `apns.fleet` (contract §5): a heartbeat with the sender's
/// state, or an operator's pause/resume of a bundle. JSON, so `GET /api/fleet` and
/// `apns-worker fleet --json` show the same fields the wire carries.
public enum FleetMessage: Sendable, Hashable {
    case heartbeat(FleetInstance)
    case pause(bundleID: String)
    case resume(bundleID: String)

    private struct Envelope: Codable {
        var kind: String
        var instance: FleetInstance?
        var bundleId: String?
    }

    public func encoded() -> [UInt8] {
        let envelope: Envelope
        switch self {
        case .heartbeat(let instance): envelope = Envelope(kind: "heartbeat", instance: instance)
        case .pause(let bundleID): envelope = Envelope(kind: "pause", bundleId: bundleID)
        case .resume(let bundleID): envelope = Envelope(kind: "resume", bundleId: bundleID)
        }
        // Plain value types always encode.
        return Array((try? FleetJSON.encoder.encode(envelope)) ?? Data())
    }

    /// Contract §5: the largest fleet message read (about 300 bundles of a heartbeat with their
    /// longest names, or 500 with ordinary ones). Anything larger is not decoded at all (the
    /// consumer does not even keep its bytes), so a forged one costs a listener nothing.
    public static let maxBodyBytes = 64 << 10

    /// The wire form of this instance's heartbeat within `maxBodyBytes`, which every listener
    /// would otherwise ignore whole: an instance with more bundles than fit sends its first ones
    /// by bundle ID, and says how many it left out.
    public static func heartbeatBody(_ instance: FleetInstance) -> (body: [UInt8], leftOut: Int) {
        let whole = FleetMessage.heartbeat(instance).encoded()
        guard whole.count > maxBodyBytes else { return (whole, 0) }
        let keys = instance.bundles.keys.sorted()
        func body(keeping count: Int) -> [UInt8] {
            var trimmed = instance
            trimmed.bundles = Dictionary(uniqueKeysWithValues: keys.prefix(count).map { ($0, instance.bundles[$0]!) })
            return FleetMessage.heartbeat(trimmed).encoded()
        }
        // The most bundles that fit, by bisection: (fits, does not fit].
        var fits = 0
        var tooMany = keys.count
        while tooMany - fits > 1 {
            let middle = (fits + tooMany) / 2
            if body(keeping: middle).count <= maxBodyBytes { fits = middle } else { tooMany = middle }
        }
        return (body(keeping: fits), keys.count - fits)
    }

    /// Nil for anything that is not one of ours (another version's kind, garbage) or not well
    /// formed (contract §5: bounded strings, counts from 0 to 2^53): the fleet exchange is open to
    /// any client of the vhost, and one bad message must not stop a listener.
    public static func decode(_ body: [UInt8]) -> FleetMessage? {
        guard body.count <= maxBodyBytes,
            let envelope = try? FleetJSON.decoder.decode(Envelope.self, from: Data(body))
        else { return nil }
        switch envelope.kind {
        case "heartbeat": return envelope.instance.flatMap { $0.isWellFormed ? .heartbeat($0) : nil }
        case "pause": return envelope.bundleId.flatMap { FleetInstance.isBundleKey($0) ? .pause(bundleID: $0) : nil }
        case "resume": return envelope.bundleId.flatMap { FleetInstance.isBundleKey($0) ? .resume(bundleID: $0) : nil }
        default: return nil
        }
    }
}

/// One instance as its heartbeat describes it. `lastSeen` is the receiver's clock at the last
/// heartbeat (absent on the wire).
public struct FleetInstance: Sendable, Hashable, Codable {
    public struct Bundle: Sendable, Hashable, Codable {
        /// Counts since the instance started, by end.
        public var delivered: Int
        public var invalidToken: Int
        public var retry: Int
        public var dead: Int
        public var gated: Int
        public var inFlight: Int
        /// A provider fault holds it (contract §4).
        public var held: Bool
        /// An operator paused it fleet-wide (contract §5).
        public var paused: Bool
        /// APNs connections by state.
        public var connections: [String: Int]
        /// The AMQP `timestamp` of the newest job this instance took from the work queue, when
        /// the publisher set one: the queue latency estimate (`QueueLatency`).
        public var lastTakenPublishedAt: Date?

        public init(
            delivered: Int = 0, invalidToken: Int = 0, retry: Int = 0, dead: Int = 0, gated: Int = 0, inFlight: Int = 0,
            held: Bool = false, paused: Bool = false, connections: [String: Int] = [:], lastTakenPublishedAt: Date? = nil
        ) {
            self.delivered = delivered
            self.invalidToken = invalidToken
            self.retry = retry
            self.dead = dead
            self.gated = gated
            self.inFlight = inFlight
            self.held = held
            self.paused = paused
            self.connections = connections
            self.lastTakenPublishedAt = lastTakenPublishedAt
        }

        var isWellFormed: Bool {
            let count = 0...UntrustedText.maxCount
            guard [delivered, invalidToken, retry, dead, gated, inFlight].allSatisfy(count.contains),
                connections.count <= FleetInstance.maxConnectionStates
            else { return false }
            return connections.allSatisfy { state, number in
                UntrustedText.isPlain(state, maxBytes: FleetInstance.maxBrokerStateBytes) && count.contains(number)
            }
        }

        /// The count of one end this heartbeat reports (0 for an end it does not carry).
        public func count(_ end: JobEnd) -> Int {
            switch end {
            case .delivered: delivered
            case .invalidToken: invalidToken
            case .retry: retry
            case .dead: dead
            case .gated: gated
            case .held, .fannedOut, .coalesced, .trailing: 0
            }
        }
    }

    public var id: String
    public var host: String
    public var pid: Int32
    public var version: String
    public var startedAt: Date
    public var lastSeen: Date?
    /// Resident memory in bytes.
    public var rssBytes: Int
    /// User + system CPU time since the process started.
    public var cpuSeconds: Double
    /// The broker connection (`AMQPConnectionState` raw value).
    public var broker: String
    /// The sender's heartbeat interval in seconds: a listener forgets it after three of them.
    public var heartbeatInterval: Double
    public var bundles: [String: Bundle]

    public init(
        id: String, host: String, pid: Int32, version: String, startedAt: Date, lastSeen: Date? = nil, rssBytes: Int,
        cpuSeconds: Double, broker: String, heartbeatInterval: Double, bundles: [String: Bundle]
    ) {
        self.id = id
        self.host = host
        self.pid = pid
        self.version = version
        self.startedAt = startedAt
        self.lastSeen = lastSeen
        self.rssBytes = rssBytes
        self.cpuSeconds = cpuSeconds
        self.broker = broker
        self.heartbeatInterval = heartbeatInterval
        self.bundles = bundles
    }

    public var heldBundles: [String] { bundles.filter(\.value.held).map(\.key).sorted() }

    /// Bounds of a heartbeat's text fields, in UTF-8 bytes.
    public static let maxIDBytes = 200
    public static let maxHostBytes = 255
    public static let maxVersionBytes = 100
    public static let maxBrokerStateBytes = 64
    /// A bundle key: a configured bundle ID (the configuration allows more than §6's shape).
    public static let maxBundleKeyBytes = 255
    /// APNs connection states per bundle (a handful are real).
    public static let maxConnectionStates = 16

    /// Contract §5: text fields bounded and free of control characters, every count and size
    /// from 0 to 2^53, times finite. A heartbeat that is not is ignored whole (a listener cannot
    /// tell which part of a forged or damaged heartbeat to believe). The number of bundles is not
    /// bounded here: `FleetView` keeps the first 1,000 and counts the rest as dropped.
    public var isWellFormed: Bool {
        let count = 0...UntrustedText.maxCount
        guard UntrustedText.isPlain(id, maxBytes: Self.maxIDBytes),
            UntrustedText.isPlain(host, maxBytes: Self.maxHostBytes, allowEmpty: true),
            UntrustedText.isPlain(version, maxBytes: Self.maxVersionBytes, allowEmpty: true),
            UntrustedText.isPlain(broker, maxBytes: Self.maxBrokerStateBytes, allowEmpty: true),
            pid >= 0, count.contains(rssBytes),
            cpuSeconds.isFinite, cpuSeconds >= 0, cpuSeconds <= Double(UntrustedText.maxCount),
            heartbeatInterval.isFinite, heartbeatInterval > 0,
            startedAt.timeIntervalSince1970.isFinite
        else { return false }
        return bundles.allSatisfy { key, bundle in Self.isBundleKey(key) && bundle.isWellFormed }
    }

    public static func isBundleKey(_ key: String) -> Bool { UntrustedText.isPlain(key, maxBytes: maxBundleKeyBytes) }
    /// Saturating: a heartbeat may carry more than 1,000 bundles of 2^53 each before a view trims it.
    public var inFlight: Int { bundles.values.reduce(0) { $0.saturatingAdd($1.inFlight) } }
}


/// RFC 3339 dates, sorted keys: the one JSON form of the fleet on the wire, the API and the CLI.
/// Dates are written and read by `RFC3339`, not `.iso8601`, which formats and parses through ICU
/// on Linux: every instance's first heartbeat would fault ICU into the worker (docs/benchmarks.md,
/// "The ICU pair taken out"). The strings on the wire are the ones `.iso8601` wrote; a date that
/// is not RFC 3339 fails as it did, with `DecodingError.dataCorrupted`.
public enum FleetJSON {
    public static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .rfc3339
        return encoder
    }()

    public static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .rfc3339
        return decoder
    }()
}
