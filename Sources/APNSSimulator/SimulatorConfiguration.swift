/// The simulator's public value types: what it is configured with, what a test can script and
/// inject at runtime, and what it reports back (counters, accepted notifications).
import APNSBinaryProtocol
import APNSModel
import Crypto
import Foundation

/// TLS for the simulator's listener. The server always speaks TLS with ALPN `h2`, as Apple does.
public struct SimulatorTLSConfiguration: Sendable {
    /// The server certificate chain, PEM, leaf first.
    public var certificateChainPEM: String
    /// The server's private key, PEM (PKCS#8 or SEC1).
    public var privateKeyPEM: String
    /// CA certificates (PEM) that client certificates are verified against. Without it no client
    /// certificate is requested and only token authentication works.
    public var clientCAPEM: String?
    /// Refuse the TLS handshake when the client presents no certificate. When false a client
    /// certificate is optional, but one that is presented must verify against `clientCAPEM`.
    public var requireClientCertificate: Bool

    public init(certificateChainPEM: String, privateKeyPEM: String, clientCAPEM: String? = nil, requireClientCertificate: Bool = false) {
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
        self.clientCAPEM = clientCAPEM
        self.requireClientCertificate = requireClientCertificate
    }
}

/// A provider token signing key the simulator accepts: Apple's "key ID" and "team ID" with the
/// public half of the `.p8` key, and what Apple lets the key sign for (`AppleRules.KeyLimits`).
public struct SimulatorTokenKey: Sendable {
    public var keyID: String
    public var teamID: String
    public var publicKey: P256.Signing.PublicKey
    /// The one environment of a team-scoped or topic-specific key: a token of it sent to the
    /// other environment's simulator is 403 `BadEnvironmentKeyInToken`. nil: both environments.
    public var environment: APNSEnvironment?
    /// A topic-specific key's topics: a request for any other topic is 400 `TopicDisallowed`.
    /// nil: every topic of its team.
    public var topics: [String]?

    public init(
        keyID: String, teamID: String, publicKey: P256.Signing.PublicKey, environment: APNSEnvironment? = nil,
        topics: [String]? = nil
    ) {
        self.keyID = keyID
        self.teamID = teamID
        self.publicKey = publicKey
        self.environment = environment
        self.topics = topics
    }
}

public struct SimulatorConfiguration: Sendable {
    /// Address to listen on; default `127.0.0.1`.
    public var host: String
    /// Port to listen on; 0 picks a free one (read it back from `APNSSimulator.port`).
    public var port: Int
    /// Port of the legacy binary provider gateway (Apple's 2195): nil runs none, 0 picks a free
    /// one (read it back from `APNSSimulator.binaryPort`). It shares `tls` but always requires a
    /// client certificate signed by `tls.clientCAPEM`, as Apple's gateway did.
    public var binaryPort: Int?
    /// Port of the legacy feedback service (Apple's 2196), same rules as `binaryPort`.
    public var feedbackPort: Int?
    /// Port of the channel management service (Apple's own host, 2195 in development and 2196 in
    /// production): nil runs none, 0 picks a free one (`APNSSimulator.channelPort`). Same TLS and
    /// credentials as the provider API.
    public var channelPort: Int?
    public var tls: SimulatorTLSConfiguration
    /// The apps that may be pushed to. A topic is one of these, or one of these plus the suffix
    /// its push type requires (`.voip`, `.complication`, …).
    public var bundleIDs: [String]
    /// Keys whose provider tokens (JWT, ES256) are accepted; several keys of several teams may
    /// be given (`AppleRules.checkKeys` holds them to Apple's limits at start).
    public var tokenKeys: [SimulatorTokenKey]
    /// The team that owns each bundle ID: a provider token of another team for its topics is
    /// 400 `TopicDisallowed`. A bundle not named here may be pushed with any accepted key.
    public var bundleTeams: [String: String] = [:]
    /// SETTINGS_MAX_CONCURRENT_STREAMS advertised on every connection; default 1000.
    public var maxConcurrentStreams: Int
    /// When set, a new connection first advertises this many concurrent streams and raises the
    /// limit to `maxConcurrentStreams` (with a SETTINGS frame) once its first token-authenticated
    /// request has been validated, as Apple does (it starts at 1).
    public var maxConcurrentStreamsBeforeFirstToken: Int?
    /// Which of Apple's environments this is: responses carry `apns-unique-id` in sandbox only,
    /// and a key limited to the other environment is refused (`SimulatorTokenKey.environment`).
    public var environment: APNSEnvironment
    /// How many accepted notifications are kept for `APNSSimulator.accepted()` (the oldest are
    /// dropped first); 0 keeps none. Counters are kept regardless.
    public var recordLimit: Int
    /// A provider token older than this is answered with 403 `ExpiredProviderToken`; Apple: 1 hour.
    public var providerTokenLifetime: Duration
    /// A connection that switches to a new provider token sooner than this after its previous one
    /// is answered with 429 `TooManyProviderTokenUpdates`; Apple: 20 minutes.
    public var minimumTokenUpdateInterval: Duration

    public init(
        host: String = "127.0.0.1",
        port: Int = 0,
        binaryPort: Int? = nil,
        feedbackPort: Int? = nil,
        channelPort: Int? = nil,
        tls: SimulatorTLSConfiguration,
        bundleIDs: [String],
        tokenKeys: [SimulatorTokenKey] = [],
        maxConcurrentStreams: Int = 1000,
        maxConcurrentStreamsBeforeFirstToken: Int? = nil,
        environment: APNSEnvironment = .production,
        recordLimit: Int = 10_000,
        providerTokenLifetime: Duration = .seconds(3600),
        minimumTokenUpdateInterval: Duration = .seconds(20 * 60)
    ) {
        self.host = host
        self.port = port
        self.binaryPort = binaryPort
        self.feedbackPort = feedbackPort
        self.channelPort = channelPort
        self.tls = tls
        self.bundleIDs = bundleIDs
        self.tokenKeys = tokenKeys
        self.maxConcurrentStreams = maxConcurrentStreams
        self.maxConcurrentStreamsBeforeFirstToken = maxConcurrentStreamsBeforeFirstToken
        self.environment = environment
        self.recordLimit = recordLimit
        self.providerTokenLifetime = providerTokenLifetime
        self.minimumTokenUpdateInterval = minimumTokenUpdateInterval
    }
}

/// What the simulator answers for one device token once a request for it passed validation.
public enum ScriptedOutcome: Sendable, Hashable {
    /// 200 (the default for every token).
    case accept
    /// 410 `Unregistered` with Apple's `timestamp` (ms since the epoch).
    case unregistered(timestamp: Int64)
    /// 410 `ExpiredToken` with a `timestamp` (ms since the epoch).
    case expiredToken(timestamp: Int64)
    /// 400 `BadDeviceToken`.
    case badDeviceToken
    /// 400 `DeviceTokenNotForTopic`.
    case deviceTokenNotForTopic
    /// The first `count` requests for the token get `status`/`reason`, later ones 200.
    case failFirst(Int, status: Int, reason: APNSReason)
    /// Every request for the token gets `status`/`reason`.
    case always(status: Int, reason: APNSReason)
    /// The request is read but never answered (the stream stays open until the connection
    /// closes): for request deadlines.
    case neverAnswer
    /// Every request for the token gets `status`/`reason` with a JSON body padded to `bodyBytes`
    /// (no APNs answer is larger than about 60 bytes): for the client's cap on answer bodies.
    case oversizedBody(status: Int, reason: APNSReason, bodyBytes: Int)
    /// Binary gateway only: every frame for the token gets an error response with this status
    /// (10 accepts the frame and names it as the last one processed, as Apple's shutdown does).
    /// HTTP/2 requests for the token are accepted.
    case binaryStatus(UInt8)
}

/// Faults injected at runtime with `APNSSimulator.setFaults`. The default value injects nothing.
public struct SimulatorFaults: Sendable, Hashable {
    /// Fractions (0.0–1.0) of valid requests answered 429 `TooManyRequests`, 500
    /// `InternalServerError` and 503 `ServiceUnavailable` instead of their scripted outcome.
    public var rate429: Double
    public var rate500: Double
    public var rate503: Double
    /// Seed of the random generator that picks the failing requests; the same seed and the same
    /// order of requests give the same failures.
    public var seed: UInt64
    /// Added before every answer.
    public var latency: Duration
    /// Each connection sends GOAWAY (NO_ERROR, last-stream-id = its N-th stream) once N streams
    /// were opened on it and their requests read: streams up to that one are answered, later
    /// ones are never answered (the GOAWAY says they were not processed), and the connection
    /// closes when the answered ones are done.
    public var goawayAfterStreams: Int?
    /// Each connection is closed abruptly (no GOAWAY, no answers for streams in flight) when the
    /// request of its N-th stream has been read.
    public var dropAfterStreams: Int?
    /// Overrides `SimulatorConfiguration.maxConcurrentStreams`: new connections advertise it, open
    /// ones receive a SETTINGS frame with it.
    public var maxConcurrentStreams: Int?
    /// Every request (valid or not past its route) is answered 403 with this reason, for as long
    /// as it is set: `.invalidProviderToken` simulates revoked credentials.
    public var rejectAllTokens: APNSReason?
    /// Binary gateway: once N frames were processed on a connection, the N-th is accepted, an
    /// error response with status 10 (shutdown) names it as the last one processed, and the
    /// connection closes; later frames on it are discarded.
    public var binaryShutdownAfterFrames: Int?
    /// Binary gateway: once N frames were processed on a connection (all accepted), it closes
    /// without an error response; later frames on it are discarded.
    public var binaryCloseSilentlyAfterFrames: Int?
    /// Binary gateway: the n-th frame (1-based) the gateway processes since start or the last
    /// `setFaults`, over all connections, gets an error response with this status (bad tokens at
    /// chosen positions). Frames discarded after an error are not processed and not counted.
    public var binaryStatusAtFrame: [Int: UInt8]
    /// How far the simulator's clock runs ahead of the provider's when it judges provider tokens:
    /// with an hour or more, every token it is sent is already expired (`ExpiredProviderToken`),
    /// as when a provider's clock is behind Apple's.
    public var clockSkew: Duration

    public init(
        rate429: Double = 0, rate500: Double = 0, rate503: Double = 0, seed: UInt64 = 1,
        latency: Duration = .zero, goawayAfterStreams: Int? = nil, dropAfterStreams: Int? = nil,
        maxConcurrentStreams: Int? = nil, rejectAllTokens: APNSReason? = nil,
        binaryShutdownAfterFrames: Int? = nil, binaryCloseSilentlyAfterFrames: Int? = nil,
        binaryStatusAtFrame: [Int: UInt8] = [:], clockSkew: Duration = .zero
    ) {
        self.clockSkew = clockSkew
        self.rate429 = rate429
        self.rate500 = rate500
        self.rate503 = rate503
        self.seed = seed
        self.latency = latency
        self.goawayAfterStreams = goawayAfterStreams
        self.dropAfterStreams = dropAfterStreams
        self.maxConcurrentStreams = maxConcurrentStreams
        self.rejectAllTokens = rejectAllTokens
        self.binaryShutdownAfterFrames = binaryShutdownAfterFrames
        self.binaryCloseSilentlyAfterFrames = binaryCloseSilentlyAfterFrames
        self.binaryStatusAtFrame = binaryStatusAtFrame
    }

    public static let none = SimulatorFaults()
}

/// What the simulator has seen since it started.
public struct SimulatorCounters: Sendable, Hashable {
    /// Requests read completely (every stream that reached a decision).
    public var received: Int = 0
    /// Answered 200.
    public var accepted: Int = 0
    /// Answered with an error status.
    public var rejected: Int = 0
    /// Error answers by HTTP status.
    public var byStatus: [Int: Int] = [:]
    /// Error answers by Apple reason string.
    public var byReason: [String: Int] = [:]
    /// TLS connections accepted since start, and open now.
    public var connections: Int = 0
    public var openConnections: Int = 0
    /// GOAWAY frames sent by the `goawayAfterStreams` fault.
    public var goawaysSent: Int = 0
    /// Streams refused with RST_STREAM because they came after a GOAWAY's last stream.
    public var refusedStreams: Int = 0
    /// Connections closed by the `dropAfterStreams` fault.
    public var droppedConnections: Int = 0
    /// Requests left unanswered on purpose (`ScriptedOutcome.neverAnswer`).
    public var unanswered: Int = 0
    /// Binary gateway: TLS connections accepted since start, and open now.
    public var binaryConnections: Int = 0
    public var openBinaryConnections: Int = 0
    /// Binary gateway: frames processed (accepted or answered with an error response); frames
    /// discarded after an error are not counted.
    public var binaryReceived: Int = 0
    /// Binary gateway: frames accepted (including the one a shutdown names).
    public var binaryAccepted: Int = 0
    /// Binary gateway: error responses sent, by status code.
    public var binaryByStatus: [UInt8: Int] = [:]
    /// Binary gateway: connections closed without an error response (`binaryCloseSilentlyAfterFrames`).
    public var binarySilentCloses: Int = 0
    /// Feedback service: connections served, and tuples written to them.
    public var feedbackConnections: Int = 0
    public var feedbackTuplesServed: Int = 0
    /// Feedback service: connections served, by the app (topic) their client certificate names.
    public var feedbackConnectionsByTopic: [String: Int] = [:]
    /// Broadcasts answered 200 (also counted in `accepted`).
    public var broadcastsAccepted: Int = 0
    /// Channel management requests read completely, whatever their answer.
    public var channelRequests: Int = 0

    public init() {}

    /// Error answers with this reason.
    public func count(_ reason: APNSReason) -> Int { byReason[reason.rawValue] ?? 0 }

    /// Binary error responses with this status.
    public func count(_ status: BinaryStatus) -> Int { binaryByStatus[status.rawValue] ?? 0 }
}

/// One notification the simulator accepted: answered 200 over HTTP/2, or a binary frame that got
/// no error response.
public struct AcceptedNotification: Sendable, Hashable {
    /// Which of the simulator's listeners took it.
    public enum Transport: Sendable, Hashable {
        case http2
        case binary
    }

    public enum Authentication: Sendable, Hashable {
        /// A provider token signed by this key.
        case token(keyID: String, teamID: String)
        /// A TLS client certificate, without a provider token.
        case certificate
    }

    /// Lower-case hexadecimal.
    public var token: String
    /// Binary: the bundle ID named by the client certificate's common name
    /// (`Apple Push Services: <bundle>`), or the whole common name.
    public var topic: String
    /// The `apns-id` answered (the request's, or the one the simulator assigned); empty for
    /// binary frames, which have no such thing.
    public var apnsID: String
    /// The `apns-push-type` Apple would have applied (the header's, or the one the topic
    /// implies). Binary: always `alert`, the protocol has no push type (see `transport`).
    public var pushType: String
    /// Binary: the frame's priority item, 10 when absent (Apple's default).
    public var priority: Int
    public var expiration: Int?
    public var collapseID: String?
    public var payload: [UInt8]
    public var authentication: Authentication
    public var receivedAt: Date
    public var transport: Transport = .http2
    /// Binary: the frame's notification identifier item, nil when it had none.
    public var binaryIdentifier: UInt32? = nil
    /// A broadcast's `apns-channel-id` (then `token` is empty and `topic` the bundle ID).
    public var channel: String? = nil
}
