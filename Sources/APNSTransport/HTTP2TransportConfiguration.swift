/// How an `HTTP2Transport` reaches APNs and authenticates: value types with documented
/// defaults, and the shared provider-token source for token authentication.
import APNSModel
import APNSProviderToken
import Crypto
import Foundation
import Metrics
import NIOCore
import NIOSSL
import Synchronization

/// Configuration of one `HTTP2Transport` (one credential and environment).
public struct HTTP2TransportConfiguration: Sendable {
    /// How the provider proves who it is.
    public enum Authentication: Sendable {
        /// JWT provider tokens signed with a team's key; pass the same source to every
        /// transport that uses the key so there is one token per key.
        case token(ProviderTokenSource)
        /// A TLS client certificate and its private key, both PEM files.
        case certificate(certFile: String, keyFile: String)
    }

    /// Whom to trust for the server's certificate.
    public typealias TrustRoots = TLSTrustRoots

    public var environment: APNSEnvironment
    /// Default: Apple's host for `environment`. The server certificate is verified against it.
    public var host: String
    public var port: Int = 443
    public var trustRoots: TrustRoots = .system
    public var authentication: Authentication
    /// Persistent connections kept open (each reused for as long as the server allows).
    public var connections: Int = 1
    /// The most connections open at once: those above `connections` are opened when the
    /// in-flight window wants more streams than the open ones allow, and closed after carrying
    /// nothing for `idleConnectionTimeout`. nil: `connections`, none opened on demand.
    public var maxConnections: Int?
    /// How long a connection opened on demand may carry nothing before it is closed (and how
    /// often idleness is checked).
    public var idleConnectionTimeout: Duration = .seconds(60)
    /// How long the whole pool may carry nothing before its `connections` close too; it then
    /// reports `idle`, as before its first job, and its next job opens them again.
    /// nil: they stay open. Counted in idle checks, so rounded up to `idleConnectionTimeout`.
    public var poolIdleTimeout: Duration?
    /// What `apns-worker run` uses: long enough that a bundle with a job every minute or two keeps
    /// its connections (a TLS handshake and, with tokens, one stream until the first answer cost
    /// more than an idle connection), short enough that a credential nobody uses any more does
    /// not hold connections to Apple for the life of the process.
    public static let defaultPoolIdleTimeout: Duration = .seconds(300)
    /// `poolIdleTimeout` in idle checks.
    var poolIdleChecks: Int? {
        poolIdleTimeout.map { timeout in
            let period = max(idleConnectionTimeout.wholeMillisecondsForPool, 1)
            return max(1, Int((timeout.wholeMillisecondsForPool + period - 1) / period))
        }
    }
    /// Connect only when the first notification is sent, not at start-up: for the environment a
    /// bundle only uses when a job asks for it. Until then the connections report `idle`.
    public var connectOnFirstUse = false
    /// From `send` to the answer, including any wait for a free stream; then `.timeout`.
    public var requestTimeout: Duration = .seconds(10)
    /// TCP connect plus TLS handshake plus the server's first SETTINGS.
    public var connectTimeout: Duration = .seconds(10)
    /// A PING on a connection that has been quiet this long; closed if the next one finds it unanswered.
    public var pingInterval: Duration = .seconds(60)
    /// Our own ceiling on streams per connection, under the server's SETTINGS_MAX_CONCURRENT_STREAMS.
    public var maxConcurrentStreamsPerConnection: Int = defaultMaxConcurrentStreamsPerConnection
    /// Apple's own limit; what a shared pool's bundles split (`PoolPrefetch`).
    public static let defaultMaxConcurrentStreamsPerConnection = 1000
    /// The in-flight window (`InFlightWindow`): where it starts and the least it asks for (the
    /// feeding consumer's starting prefetch), and the most (its share of `[amqp] maxInFlight`).
    public var inFlightFloor: Int = 500
    public var inFlightCeiling: Int = 4000
    /// Delay before the first reconnect attempt after a failure; doubles up to `reconnectMaxDelay`.
    public var reconnectInitialDelay: Duration = .milliseconds(100)
    public var reconnectMaxDelay: Duration = .seconds(30)

    public init(environment: APNSEnvironment, authentication: Authentication, host: String? = nil, port: Int = 443) {
        self.environment = environment
        self.authentication = authentication
        self.host = host ?? environment.defaultHost
        self.port = port
    }

    var usesTokenAuthentication: Bool {
        if case .token = authentication { return true }
        return false
    }

    /// The TLS context: h2 via ALPN, full verification, the client certificate if any.
    func makeTLSContext() throws -> NIOSSLContext {
        var certificate: (certFile: String, keyFile: String)?
        if case .certificate(let certFile, let keyFile) = authentication { certificate = (certFile, keyFile) }
        return try ClientTLS.makeContext(trustRoots: trustRoots, certificate: certificate, applicationProtocols: ["h2"])
    }
}

/// The provider token of one team key, shared by every connection (and transport) that uses the
/// key, renewed by `ProviderTokenManager`'s policy against the wall clock.
public final class ProviderTokenSource: Sendable {
    private let manager: Mutex<ProviderTokenManager>
    private let now: @Sendable () -> Date
    private let renewalsCounter = Counter(label: "apns_transport_jwt_renewals_total")

    public init(
        teamID: String, keyID: String, key: P256.Signing.PrivateKey,
        maximumAge: Duration = ProviderTokenManager.defaultMaximumAge,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.manager = Mutex(ProviderTokenManager(teamID: teamID, keyID: keyID, key: key, maximumAge: maximumAge))
        self.now = now
    }

    /// Reads the key from an `AuthKey_<keyID>.p8` PEM file.
    public convenience init(teamID: String, keyID: String, p8File: String) throws {
        let pem = try String(contentsOfFile: p8File, encoding: .utf8)
        try self.init(teamID: teamID, keyID: keyID, key: P256.Signing.PrivateKey(pemRepresentation: pem))
    }

    /// Tokens signed so far.
    public var renewals: Int { manager.withLock { $0.renewals } }

    /// The token to send a request with now.
    public func token() throws -> ProviderToken {
        let (token, renewed) = try manager.withLock { try $0.token(now: now()) }
        if renewed { renewalsCounter.increment() }
        return token
    }

    /// APNs answered `ExpiredProviderToken` for `rejected`: the token to retry with.
    public func expired(_ rejected: ProviderToken) throws -> ProviderToken {
        let (token, renewed) = try manager.withLock { try $0.expiredTokenReported(rejected, now: now()) }
        if renewed { renewalsCounter.increment() }
        return token
    }
}

extension Duration {
    /// NIO's unit for timers and timeouts.
    var timeAmount: TimeAmount { .nanoseconds(nanoseconds) }
}

extension Duration {
    /// Whole milliseconds, for counting idle checks.
    fileprivate var wholeMillisecondsForPool: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
