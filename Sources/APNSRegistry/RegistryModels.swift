import APNSConfig
import APNSModel
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

/// Devices per bundle ID for the bundle IDs with the most devices, busiest first, and what the
/// bundle IDs left out hold (`RegistryStore.deviceCounts`).
public struct DeviceCountSummary: Sendable, Hashable, Codable {
    public var bundles: [BundleDeviceCount]
    public var bundlesNotShown: Int64
    public var activeNotShown: Int64
    public var invalidNotShown: Int64
    public init(bundles: [BundleDeviceCount], bundlesNotShown: Int64 = 0, activeNotShown: Int64 = 0, invalidNotShown: Int64 = 0) {
        self.bundles = bundles
        self.bundlesNotShown = bundlesNotShown
        self.activeNotShown = activeNotShown
        self.invalidNotShown = invalidNotShown
    }
}

/// Hourly counts of the bundle IDs with the most notifications, and how many bundle IDs (and
/// notifications) were left out (`RegistryStore.countSummary`).
public struct CountSummary: Sendable, Hashable, Codable {
    public var rows: [CountRow]
    /// Bundle IDs with counts in the time asked for, shown or not.
    public var bundles: Int64
    public var bundlesNotShown: Int64
    /// Notifications counted for the bundle IDs not shown.
    public var countNotShown: Int64
    public init(rows: [CountRow], bundles: Int64, bundlesNotShown: Int64 = 0, countNotShown: Int64 = 0) {
        self.rows = rows
        self.bundles = bundles
        self.bundlesNotShown = bundlesNotShown
        self.countNotShown = countNotShown
    }
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

/// What the URL's `sslmode` and `sslrootcert` ask of a connection, as libpq reads them:
/// - `disable`: no TLS;
/// - `allow`, `prefer`: TLS when the server offers it, else plaintext (postgres-nio's `prefer`;
///   libpq's `allow` tries plaintext first, which postgres-nio cannot: TLS first is the safer
///   of the two);
/// - `require`: TLS or nothing;
/// - `verify-ca`: TLS, the chain verified; `verify-full`: also the host name.
/// With `sslrootcert` the chain is verified in every TLS mode against that file (libpq does the
/// same when its root certificate file exists); without it `verify-ca`/`verify-full` trust
/// the system's roots (libpq would look for ~/.postgresql/root.crt, a file a service has not).
enum RegistryTLS {
    case disable
    case prefer(TLSConfiguration)
    case require(TLSConfiguration)

    init(_ url: PostgresURL) {
        var config = TLSConfiguration.makeClientConfiguration()
        if let file = url.rootCertificateFile { config.trustRoots = .file(file) }
        switch url.sslMode {
        case .verifyFull: config.certificateVerification = .fullVerification
        case .verifyCA: config.certificateVerification = .noHostnameVerification
        case .disable, .allow, .prefer, .require:
            config.certificateVerification = url.verifiesCertificate ? .noHostnameVerification : .none
        }
        switch url.sslMode {
        case .disable: self = .disable
        case .allow, .prefer: self = .prefer(config)
        case .require, .verifyCA, .verifyFull: self = .require(config)
        }
    }

    var forPool: PostgresClient.Configuration.TLS {
        switch self {
        case .disable: .disable
        case .prefer(let config): .prefer(config)
        case .require(let config): .require(config)
        }
    }

    func forConnection() throws -> PostgresConnection.Configuration.TLS {
        switch self {
        case .disable: .disable
        case .prefer(let config): .prefer(try NIOSSLContext(configuration: config))
        case .require(let config): .require(try NIOSSLContext(configuration: config))
        }
    }
}

extension RegistryStore {
    /// A store on a new pooled client for `settings` (the client runs in `run()`).
    public convenience init(settings: RegistrySettings, logger: Logger, operationTimeout: Duration = .seconds(10)) throws {
        let url = settings.url
        var configuration = PostgresClient.Configuration(
            host: url.host, port: url.port, username: url.user, password: url.password, database: url.database,
            tls: RegistryTLS(url).forPool)
        configuration.options.maximumConnections = settings.poolSize
        configuration.options.connectTimeout = .seconds(5)
        // The driver logs every failed connection attempt at info: while the registry is down
        // that is one line per back-off step; our own hold logs the outage once.
        var background = logger
        background.logLevel = max(logger.logLevel, .warning)
        self.init(client: PostgresClient(configuration: configuration, backgroundLogger: background), logger: logger, operationTimeout: operationTimeout)
    }

    /// Opens one connection outside any pool and closes it. At start-up the pool is the wrong
    /// tool to ask with: it retries behind a circuit breaker and, a minute later, reports only
    /// that the breaker tripped, where the operator needs the server's own reason (refused, no
    /// such database, authentication failed) and needs it at once.
    static func connectOnce(_ settings: RegistrySettings, logger: Logger) async throws {
        let url = settings.url
        var configuration = PostgresConnection.Configuration(
            host: url.host, port: url.port, username: url.user, password: url.password, database: url.database,
            tls: try RegistryTLS(url).forConnection())
        configuration.options.connectTimeout = .seconds(10)
        var quiet = logger
        quiet.logLevel = max(logger.logLevel, .warning)
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: quiet)
        try await connection.close()
    }
}
