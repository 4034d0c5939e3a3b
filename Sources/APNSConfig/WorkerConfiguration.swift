import APNSChannelManagement
import APNSModel
import APNSTopologyNames
import Foundation

/// The typed configuration the worker runs on. Every field has the default documented here and
/// in `config/apns-worker.conf`; `ConfigurationLoader` fills it from a file and the environment.
public struct WorkerConfiguration: Sendable, Hashable {
    public var amqp: AMQPSettings
    public var retry: RetrySettings
    public var admin: AdminSettings
    public var worker: WorkerSettings
    /// One entry per `[apns "bundle.id"]` section, in file order; never empty once loaded.
    public var bundles: [BundleConfiguration]
    /// `[registry]` (contract §6), or nil: no registry, none of §6's queues.
    public var registry: RegistrySettings? = nil
    /// `[tracing]`, or nil: no spans are made or exported.
    public var tracing: TracingSettings? = nil

    public init(
        amqp: AMQPSettings, retry: RetrySettings = .init(), admin: AdminSettings = .init(),
        worker: WorkerSettings = .init(), bundles: [BundleConfiguration]
    ) {
        self.amqp = amqp
        self.retry = retry
        self.admin = admin
        self.worker = worker
        self.bundles = bundles
    }
}

/// `[amqp]`: the broker.
public struct AMQPSettings: Sendable, Hashable {
    /// `url`, repeatable: a failover list tried in order (`amqp://` or `amqps://`). Required.
    public var urls: [String]
    /// `prefetch`: unacknowledged jobs a bundle's consumer starts with (1 to 65535). Written
    /// (`prefetchWritten`), it is also the most this instance ever holds unacked for one bundle
    /// (contract §3): the window stays there. Unwritten, the in-flight window grows from the
    /// default 500 to the bundle's share of `maxInFlight` with Apple's round trip.
    public var prefetch: Int
    /// Whether the file or the environment wrote `prefetch` (a bound, not only a start).
    public var prefetchWritten: Bool
    /// `maxInFlight`: unacknowledged jobs across all of this instance's bundles (1 to 1,000,000),
    /// shared evenly between their consumers (`InFlightBudget`). Default 2000.
    public var maxInFlight: Int
    /// `heartbeat`: AMQP heartbeat, whole seconds; `0s` turns heartbeats off. Default 30s.
    public var heartbeat: Duration
    /// `queueType`: `quorum` (default) or `classic` for work, retry and dead queues.
    public var queueType: QueueType
    /// `caFile`: PEM CA certificates to trust for `amqps://` URLs; the system roots otherwise.
    public var caFile: String?

    public static let defaultPrefetch = 500
    public static let defaultMaxInFlight = InFlightBudget.defaultMaxInFlight
    public static let defaultHeartbeat: Duration = .seconds(30)

    public init(
        urls: [String], prefetch: Int = defaultPrefetch, maxInFlight: Int = defaultMaxInFlight,
        heartbeat: Duration = defaultHeartbeat, queueType: QueueType = .quorum, caFile: String? = nil,
        prefetchWritten: Bool = false
    ) {
        self.urls = urls
        self.prefetch = prefetch
        self.prefetchWritten = prefetchWritten
        self.maxInFlight = maxInFlight
        self.heartbeat = heartbeat
        self.queueType = queueType
        self.caFile = caFile
    }

    /// The budget `maxInFlight` and `prefetch` make: each bundle consumer's share.
    public var inFlightBudget: InFlightBudget {
        InFlightBudget(maxInFlight: maxInFlight, prefetch: prefetch, prefetchBoundsWindow: prefetchWritten)
    }

    /// The URLs with their passwords replaced by `***`, for logs and summaries.
    public var maskedURLs: [String] { urls.map(Self.maskingPassword) }

    /// `amqp://user:secret@host/vhost` → `amqp://user:***@host/vhost`, for every URL in the
    /// text (a URL alone, or an error message that quotes some).
    public static func maskingPassword(_ url: String) -> String {
        var out = ""
        var rest = Substring(url)
        // Every URL in the text, not only one at its start: error messages quote URLs.
        while let schemeEnd = rest.range(of: "://") {
            let urlEnd = rest[schemeEnd.upperBound...].firstIndex(where: { $0.isWhitespace || "\"'<>`".contains($0) }) ?? rest.endIndex
            out += rest[..<schemeEnd.upperBound]
            let target = rest[schemeEnd.upperBound..<urlEnd]
            // The LAST "@" ends the user info: a password may hold "@", ":", "/", "?" or "#"
            // unescaped, and hiding a little too much of a URL is the safe mistake.
            if let at = target.lastIndex(of: "@"), let colon = target[..<at].firstIndex(of: ":") {
                out += target[...colon] + "***" + target[at...]
            } else {
                out += target
            }
            rest = rest[urlEnd...]
        }
        return out + rest
    }
}

/// `[retry]`: backoff between attempts of a job that APNs asked us to retry.
public struct RetrySettings: Sendable, Hashable {
    /// `delays`: the wait before the 2nd, 3rd, ... attempt. When there are fewer delays than
    /// retries, the last delay repeats. Default 10s, 1m, 5m, 15m, 15m.
    public var delays: [Duration]
    /// `maxAttempts`: attempts in all, the first included (1 to 1000); a job whose last attempt
    /// asks for a retry is dead-lettered with `RetriesExhausted`. Default 6.
    public var maxAttempts: Int

    public static let defaultDelays: [Duration] = [.seconds(10), .seconds(60), .seconds(300), .seconds(900), .seconds(900)]
    public static let defaultMaxAttempts = 6

    public init(delays: [Duration] = defaultDelays, maxAttempts: Int = defaultMaxAttempts) {
        self.delays = delays
        self.maxAttempts = maxAttempts
    }

    /// The wait after failed attempt `attempt` (1-based), or nil when no attempt is left.
    public func delay(afterAttempt attempt: Int) -> Duration? {
        guard attempt >= 1, attempt < maxAttempts, let last = delays.last else { return nil }
        return attempt <= delays.count ? delays[attempt - 1] : last
    }
}

/// A `host:port` to listen on.
public struct ListenAddress: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    /// 0 asks the system for a free port (tests).
    public var port: Int
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Whether only this machine can reach the address: `localhost`, 127.0.0.0/8 or `::1`.
    public var isLoopback: Bool {
        let host = host.lowercased()
        if host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }
}

/// `[admin]`: the operator HTTP server.
public struct AdminSettings: Sendable, Hashable {
    /// `listen`: `host:port`. Default 127.0.0.1:8080.
    public var listen: ListenAddress
    /// `token`: when set, every admin request except `/health` must carry
    /// `Authorization: Bearer <token>` (or the session cookie `POST /login` sets). Required when `listen` is
    /// not a loopback address. Best given as `APNS_WORKER_ADMIN_TOKEN`.
    public var token: String?
    /// `metricsToken`: a read-only credential for `GET /metrics` alone (Prometheus), apart from
    /// `token`, which can requeue and purge jobs. Needs `token`, and must differ from it. Best
    /// given as `APNS_WORKER_ADMIN_METRICSTOKEN`.
    public var metricsToken: String?
    /// `heartbeatInterval`: how often this instance announces itself on `apns.fleet` (contract
    /// §5); listeners forget an instance silent for three intervals, and a pause reaches every
    /// instance within one. 100ms to 5m, default 5s.
    public var heartbeatInterval: Duration
    /// `allowedHosts`: more host names (besides the listen host, `localhost`, `127.0.0.1` and
    /// `::1`) a token-less admin answers to, e.g. a name in /etc/hosts. Requests naming any
    /// other `Host` are refused (DNS rebinding). Unused with a token.
    public var allowedHosts: [String] = []
    /// `certFile` and `keyFile` (PEM, both or neither): serve the admin over TLS (HTTPS), and
    /// mark its session cookie `Secure`.
    public var certFile: String?
    public var keyFile: String?

    public static let defaultListen = ListenAddress(host: "127.0.0.1", port: 8080)
    public static let defaultHeartbeatInterval = Duration.seconds(5)

    public init(listen: ListenAddress = defaultListen, token: String? = nil, heartbeatInterval: Duration = defaultHeartbeatInterval) {
        self.listen = listen
        self.token = token
        self.heartbeatInterval = heartbeatInterval
    }

    /// True when the admin is served over TLS.
    public var usesTLS: Bool { certFile != nil }
}

/// `[worker]`: timing of the worker process itself.
public struct WorkerSettings: Sendable, Hashable {
    /// `shutdownDeadline`: on SIGTERM, how long jobs in flight may take to finish. Default 30s.
    public var shutdownDeadline: Duration
    /// `requestTimeout`: how long to wait for APNs to answer one notification before the job
    /// goes to retry. Default 10s.
    public var requestTimeout: Duration
    /// `connectTimeout`: TCP + TLS set-up to APNs. Default 10s.
    public var connectTimeout: Duration
    /// `probeInterval`: while a bundle is held (provider fault), how often to try a probe.
    /// Default 30s.
    public var probeInterval: Duration
    /// `providerTokenRefresh`: age at which a provider JWT is renewed; Apple wants 20 to 60
    /// minutes. Default 50m.
    public var providerTokenRefresh: Duration
    /// `maxDeliveries`: a job delivered more often than this without reaching an end is a
    /// poison job and goes to the dead queue (`DeliveryLimitExceeded`). Default 20.
    public var maxDeliveries: Int

    public static let defaultMaxDeliveries = 20
    public static let defaultShutdownDeadline: Duration = .seconds(30)
    public static let defaultRequestTimeout: Duration = .seconds(10)
    public static let defaultConnectTimeout: Duration = .seconds(10)
    public static let defaultProbeInterval: Duration = .seconds(30)
    public static let defaultProviderTokenRefresh: Duration = .seconds(50 * 60)

    public init(
        shutdownDeadline: Duration = defaultShutdownDeadline, requestTimeout: Duration = defaultRequestTimeout,
        connectTimeout: Duration = defaultConnectTimeout, probeInterval: Duration = defaultProbeInterval,
        providerTokenRefresh: Duration = defaultProviderTokenRefresh, maxDeliveries: Int = defaultMaxDeliveries
    ) {
        self.maxDeliveries = maxDeliveries
        self.shutdownDeadline = shutdownDeadline
        self.requestTimeout = requestTimeout
        self.connectTimeout = connectTimeout
        self.probeInterval = probeInterval
        self.providerTokenRefresh = providerTokenRefresh
    }
}

/// Which APNs provider API a bundle uses.
public enum APNSTransportKind: String, Sendable, Hashable, CaseIterable {
    /// The HTTP/2 provider API (the default).
    case http2
    /// The legacy binary provider API (gateway port 2195); certificate auth only.
    case binary
}

/// How the worker proves to Apple that it may push to a bundle.
public enum APNSAuthentication: Sendable, Hashable {
    /// Provider tokens (JWT, ES256) from a `.p8` key: HTTP/2 only.
    case token(teamID: String, keyID: String, tokenKeyFile: String)
    /// A TLS client certificate and its private key (PEM files).
    case certificate(certFile: String, keyFile: String)

    /// `token` or `certificate`, for summaries and logs.
    public var kindName: String {
        switch self {
        case .token: "token"
        case .certificate: "certificate"
        }
    }
}

/// The rollout gate of the seed's staged launch: which jobs of a bundle go to Apple, by the
/// sync server named in the job's `userInfo.syncServer`.
///
/// Keys in the bundle's `[apns "…"]` section (one place per bundle, no second section to keep
/// in step): `allowSyncServers` and `denySyncServers` (comma-separated host names, compared
/// case-insensitively) and `rolloutPercentage` (0 to 100). A job passes when its sync server is
/// not denied, and is allowed or the allow list is empty, and its server falls in the
/// percentage (a stable hash of the server name, so a server is consistently in or out on every
/// instance; the seed rolled push out server by server). A job without `syncServer` passes when
/// the allow list is empty and is gated otherwise. The defaults (empty lists, 100) let every
/// job through. The gate itself is `APNSWorker.RolloutRule`.
public struct RolloutGate: Sendable, Hashable {
    public var allowSyncServers: [String]
    public var denySyncServers: [String]
    public var percentage: Int

    public init(allowSyncServers: [String] = [], denySyncServers: [String] = [], percentage: Int = 100) {
        self.allowSyncServers = allowSyncServers
        self.denySyncServers = denySyncServers
        self.percentage = percentage
    }

    /// True when the defaults are in force and every job passes.
    public var isOpen: Bool { allowSyncServers.isEmpty && denySyncServers.isEmpty && percentage == 100 }
}

/// One `[apns "bundle.id"]` section.
public struct BundleConfiguration: Sendable, Hashable {
    /// The subsection name: the app's bundle ID, also the routing key and the `apns-topic`.
    public var bundleID: String
    /// `transport`: `http2` (default) or `binary`.
    public var transport: APNSTransportKind
    /// `environment` (`production`, the default, or `sandbox`), or the seed's `domain`
    /// (`push.apple.com` / `sandbox.push.apple.com`). A job's own `environment` overrides it.
    public var environment: APNSEnvironment
    public var auth: APNSAuthentication
    /// `host`: connect here instead of Apple (a simulator, a proxy); TLS verifies this name.
    public var host: String?
    /// `port`: with or without `host`; default 443 (http2) or 2195 (binary).
    public var port: Int?
    /// `caFile`: PEM CA certificates to trust for the APNs connection instead of the system roots.
    public var caFile: String?
    /// `connections`: connections to APNs per environment in use (1 to 16). Default 2 for
    /// http2, so one carries on while the other reconnects after GOAWAY; 1 for binary, whose
    /// error replay is simplest on one ordered stream.
    public var connections: Int
    /// Whether the operator wrote `connections`: then it is also the most connections the
    /// in-flight window may open; otherwise the window may open more, as it needs.
    public var connectionsSet: Bool
    /// The rollout gate (`allowSyncServers`, `denySyncServers`, `rolloutPercentage`).
    public var rollout: RolloutGate
    /// `binaryHoldWindow` (binary only): how long a written notification is kept for replay
    /// before Apple's silence counts as delivery; the binary API only reports errors.
    /// Default 1s (10ms to 1m).
    public var binaryHoldWindow: Duration
    /// `feedbackInterval` (binary only): how often the legacy feedback service is polled for
    /// tokens Apple found dead; `0` turns polling off. Default 1h (1s to 24h).
    public var feedbackInterval: Duration
    /// `feedbackPort` (binary only): the feedback service's port on `host` (Apple's feedback
    /// hosts when `host` is absent). Default 2196.
    public var feedbackPort: Int
    /// `channelHost` (http2 only): Apple's channel management service for broadcast push
    /// (contract §7) is reached here instead (a simulator). Default: Apple's host per environment.
    public var channelHost: String?
    /// `channelPort` (http2 only): default Apple's port per environment (2196 production, 2195
    /// development).
    public var channelPort: Int?
    /// The line of the section header, for messages about the bundle as a whole.
    public var line: Int?
    /// `keyEnvironment` and `keyTopics` (token auth only): what Apple lets the token key sign
    /// for. Default: both environments, every topic of the team.
    public var keyScope: TokenKeyScope = .unrestricted
    /// `events` (contract §8): which delivery events the bundle's jobs produce unless a job says
    /// otherwise. Default `none`. Applied to jobs taken after a reload.
    public var events: DeliveryEventLevel = .none

    public static let defaultBinaryHoldWindow: Duration = .seconds(1)
    public static let defaultFeedbackInterval: Duration = .seconds(3600)
    public static let defaultFeedbackPort = 2196
    public static func defaultConnections(for transport: APNSTransportKind) -> Int {
        transport == .http2 ? 2 : 1
    }

    public init(
        bundleID: String, transport: APNSTransportKind = .http2, environment: APNSEnvironment = .production,
        auth: APNSAuthentication, host: String? = nil, port: Int? = nil, caFile: String? = nil,
        connections: Int? = nil, rollout: RolloutGate = .init(),
        binaryHoldWindow: Duration = defaultBinaryHoldWindow, feedbackInterval: Duration = defaultFeedbackInterval,
        feedbackPort: Int = defaultFeedbackPort, channelHost: String? = nil, channelPort: Int? = nil, line: Int? = nil
    ) {
        self.bundleID = bundleID
        self.transport = transport
        self.environment = environment
        self.auth = auth
        self.host = host
        self.port = port
        self.caFile = caFile
        self.connections = connections ?? Self.defaultConnections(for: transport)
        self.connectionsSet = connections != nil
        self.rollout = rollout
        self.binaryHoldWindow = binaryHoldWindow
        self.feedbackInterval = feedbackInterval
        self.feedbackPort = feedbackPort
        self.channelHost = channelHost
        self.channelPort = channelPort
        self.line = line
    }

    /// Where Apple's channel management service is for `environment` (contract §7): the
    /// `channelHost`/`channelPort` overrides, else Apple's host and port for the environment.
    public func channelEndpoint(for environment: APNSEnvironment) -> (host: String, port: Int) {
        (channelHost ?? environment.channelManagementHost, channelPort ?? environment.channelManagementPort)
    }

    /// Where the legacy feedback service is for `environment`, or nil when it is not polled
    /// (http2 bundles, `feedbackInterval = 0`): `host` with `feedbackPort`, else Apple's
    /// `feedback[.sandbox].push.apple.com`.
    public func feedbackEndpoint(for environment: APNSEnvironment) -> (host: String, port: Int)? {
        guard transport == .binary, feedbackInterval > .zero else { return nil }
        let appleHost = environment == .sandbox ? "feedback.sandbox.push.apple.com" : "feedback.push.apple.com"
        return (host ?? appleHost, feedbackPort)
    }

    /// Where to connect for `environment`: the `host`/`port` overrides, else Apple's hosts
    /// (`api[.sandbox].push.apple.com:443`, binary `gateway[.sandbox].push.apple.com:2195`).
    public func endpoint(for environment: APNSEnvironment) -> (host: String, port: Int) {
        let sandbox = environment == .sandbox
        switch transport {
        case .http2:
            return (host ?? (sandbox ? "api.sandbox.push.apple.com" : "api.push.apple.com"), port ?? 443)
        case .binary:
            return (host ?? (sandbox ? "gateway.sandbox.push.apple.com" : "gateway.push.apple.com"), port ?? 2195)
        }
    }
}
