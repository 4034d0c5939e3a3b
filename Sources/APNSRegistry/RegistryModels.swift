import APNSConfig
import APNSCore
import Logging
import NIOSSL
import PostgresNIO

/// Where a fan-out page ended: the last (bundle ID, token) read.
public struct DevicePosition: Sendable, Hashable {
    public var bundleID: String
    public var token: String
    public init(bundleID: String, token: String) {
        self.bundleID = bundleID
        self.token = token
    }
}

/// A device a group job reaches.
public struct ActiveDevice: Sendable, Hashable {
    public var bundleID: String
    public var token: String
    public var environment: APNSEnvironment
    public init(bundleID: String, token: String, environment: APNSEnvironment) {
        self.bundleID = bundleID
        self.token = token
        self.environment = environment
    }
    public var position: DevicePosition { DevicePosition(bundleID: bundleID, token: token) }
}

/// Apple said a token is invalid: `at` is Apple's timestamp (ms), or the time the worker learnt it.
public struct InvalidMark: Sendable, Hashable {
    public var bundleID: String
    public var token: String
    public var reason: String
    public var at: Int64
    public init(bundleID: String, token: String, reason: String, at: Int64) {
        self.bundleID = bundleID
        self.token = token.lowercased()
        self.reason = reason
        self.at = at
    }
}

/// One row of counts: a bundle's jobs that reached `end` in the UTC hour starting at `hour`.
public struct CountRow: Sendable, Hashable, Codable {
    public var bundleId: String
    /// Seconds since the epoch.
    public var hour: Int64
    public var end: String
    public var count: Int64
}

/// Devices of a bundle ID: registered and usable, and marked invalid by Apple.
public struct BundleDeviceCount: Sendable, Hashable, Codable {
    public var bundleId: String
    public var active: Int64
    public var invalid: Int64
}

/// A device as the registry holds it (operators' view: CLI and admin API).
public struct DeviceRecord: Sendable, Hashable, Codable {
    public enum State: String, Sendable, Hashable, Codable {
        case active, invalid, unregistered
    }
    public var bundleId: String
    public var token: String
    public var group: String?
    public var environment: String
    public var state: State
    /// `at` of the last change applied, ms since the epoch.
    public var changedAt: Int64
    /// `at` of the last register applied.
    public var registeredAt: Int64?
    public var invalidReason: String?
    /// Apple's timestamp of the invalid mark, ms since the epoch.
    public var invalidAt: Int64?
}

extension RegistryStore {
    /// A store on a new pooled client for `settings` (the client runs in `run()`).
    public convenience init(settings: RegistrySettings, logger: Logger) throws {
        let url = settings.url
        let tls: PostgresClient.Configuration.TLS
        switch url.sslMode {
        case .disable: tls = .disable
        case .allow, .prefer:
            var config = TLSConfiguration.makeClientConfiguration()
            config.certificateVerification = .none
            tls = .prefer(config)
        case .require:
            var config = TLSConfiguration.makeClientConfiguration()
            config.certificateVerification = .none
            tls = .require(config)
        case .verifyCA:
            var config = TLSConfiguration.makeClientConfiguration()
            config.certificateVerification = .noHostnameVerification
            tls = .require(config)
        case .verifyFull:
            tls = .require(TLSConfiguration.makeClientConfiguration())
        }
        var configuration = PostgresClient.Configuration(
            host: url.host, port: url.port, username: url.user, password: url.password, database: url.database, tls: tls)
        configuration.options.maximumConnections = settings.poolSize
        configuration.options.connectTimeout = .seconds(5)
        // The driver logs every failed connection attempt at info: while the registry is down
        // that is one line per back-off step; our own hold logs the outage once.
        var background = logger
        background.logLevel = max(logger.logLevel, .warning)
        self.init(client: PostgresClient(configuration: configuration, backgroundLogger: background), logger: logger)
    }
}
