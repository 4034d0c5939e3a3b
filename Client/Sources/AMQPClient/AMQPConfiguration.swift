// Connection settings of AMQPClient: the failover list of broker URLs (parsed and
// percent-decoded here, without IO), TLS, heartbeats and the reconnect backoff policy.
import AMQPURLSyntax
import Foundation

/// One broker address from an `amqp://` or `amqps://` URL (RabbitMQ's URI spec):
/// `amqp[s]://[user[:password]@]host[:port][/vhost]`, every part percent-decoded.
public struct AMQPURL: Sendable, Hashable, CustomStringConvertible {
    public var tls: Bool
    public var host: String
    public var port: Int
    public var user: String
    public var password: String
    public var vhost: String

    public init(tls: Bool = false, host: String, port: Int? = nil, user: String = "guest", password: String = "guest", vhost: String = "/") {
        self.tls = tls
        self.host = host
        self.port = port ?? (tls ? 5671 : 5672)
        self.user = user
        self.password = password
        self.vhost = vhost
    }

    /// Parses `amqp://user:pass@host:5672/%2f`, the scheme in any case. No path means the
    /// default vhost `/`; `/%2f` is `/` too; `/name` is `name`. Read by `AMQPURLParts`, which the
    /// configuration's check reads `[amqp] url` with too.
    public init(string: String) throws(AMQPError) {
        let parts: AMQPURLParts
        do {
            parts = try AMQPURLParts(parsing: string)
        } catch {
            throw AMQPError(.invalidURL, "invalid AMQP URL '\(Self.redacting(string))': \(error)")
        }
        self.init(
            tls: parts.tls, host: parts.host.isEmpty ? "localhost" : parts.host, port: parts.port, user: parts.user ?? "guest",
            password: parts.password ?? "guest", vhost: parts.vhost)
    }

    /// The URL without the password, for logs and errors.
    public var description: String {
        let encodedVhost = vhost.utf8.map { byte -> String in
            Self.unreserved.contains(byte) ? String(UnicodeScalar(byte)) : "%" + (byte < 16 ? "0" : "") + String(byte, radix: 16)
        }.joined()
        let hostPart = host.contains(":") ? "[\(host)]" : host
        return "\(tls ? "amqps" : "amqp")://\(user)@\(hostPart):\(port)/\(encodedVhost)"
    }

    private static let unreserved: Set<UInt8> = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)

    /// `amqp://user:secret@host` → `amqp://user:***@host`, for messages about unparsable URLs.
    /// Any text: an `@` before the `://` (`u:p@amqp://h`, found by Fuzz:FuzzPeerHost) trapped.
    static func redacting(_ url: String) -> String {
        guard let scheme = url.range(of: "://"), let at = url.range(of: "@", options: .backwards), scheme.upperBound <= at.lowerBound,
            let colon = url[scheme.upperBound..<at.lowerBound].firstIndex(of: ":")
        else { return url }
        return String(url[..<url.index(after: colon)]) + "***" + String(url[at.lowerBound...])
    }
}

/// Capped exponential backoff with full jitter: attempt n (from 0) waits a random duration in
/// [initial·2ⁿ / 2, initial·2ⁿ], never more than `maximum`. Half the nominal delay is kept so
/// that many workers restarting together spread out without reconnecting at once.
public struct AMQPBackoff: Sendable, Hashable {
    public var initial: Duration
    public var maximum: Duration

    public init(initial: Duration = .milliseconds(500), maximum: Duration = .seconds(30)) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The nominal (jitter-free) delay before reconnect attempt `attempt`.
    public func nominalDelay(attempt: Int) -> Duration {
        let factor = 1 << min(max(attempt, 0), 30)
        let delay = initial * factor
        return delay > maximum ? maximum : delay
    }

    /// The delay to wait, with jitter drawn from `generator`.
    public func delay(attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let nominal = nominalDelay(attempt: attempt).wholeMilliseconds
        guard nominal > 1 else { return .milliseconds(nominal) }
        return .milliseconds(Int64.random(in: (nominal / 2)...nominal, using: &generator))
    }
}

/// TLS settings for `amqps://` URLs.
public struct AMQPTLSConfiguration: Sendable, Hashable {
    /// PEM file of the certificate authorities to trust; nil = the system's bundle. Read at every
    /// connect unless `caCertificates` holds its bytes (`readingCertificates`).
    public var caFile: String?
    /// The PEM bytes of `caFile` (or of the system's bundle), read once: every connect of every
    /// connection trusts these, and `caFile` only names them in errors. librabbitmq reads a CA
    /// file at each connect, so without them a file truncated on disk took effect at the next
    /// broker restart, and the reconnects failed until the worker's own restart.
    public var caCertificates: [UInt8]?
    /// Check the broker's certificate chain and host name (keep on outside tests).
    public var verifyPeer: Bool
    /// Client certificate and key (PEM) for brokers that require mutual TLS.
    public var certificateFile: String?
    public var keyFile: String?

    public init(caFile: String? = nil, verifyPeer: Bool = true, certificateFile: String? = nil, keyFile: String? = nil) {
        self.caFile = caFile
        self.verifyPeer = verifyPeer
        self.certificateFile = certificateFile
        self.keyFile = keyFile
    }

    /// Debian's bundle of the system's trusted roots.
    public static let systemBundle = "/etc/ssl/certs/ca-certificates.crt"

    /// These settings with `caCertificates` read now by `read` from `caFile`, or from the
    /// system's bundle when there is one: what a connection trusts from then on, whatever
    /// becomes of the file.
    public func readingCertificates(_ read: (String) throws -> [UInt8]) rethrows -> AMQPTLSConfiguration {
        var settings = self
        if let path = caFile ?? (FileManager.default.fileExists(atPath: Self.systemBundle) ? Self.systemBundle : nil) {
            settings.caCertificates = try read(path)
        }
        return settings
    }
}

/// Everything an `AMQPConnection` needs.
public struct AMQPConfiguration: Sendable, Hashable {
    /// Brokers to try in order; after a failure the next one is tried (failover).
    public var urls: [AMQPURL]
    /// Shown in the management UI's connection list.
    public var connectionName: String
    /// Negotiated heartbeat; 0 disables heartbeats (not recommended). Default 30 s.
    public var heartbeat: Duration
    public var tls: AMQPTLSConfiguration
    public var backoff: AMQPBackoff
    /// TCP + TLS connect and login timeout per attempt.
    public var connectTimeout: Duration
    /// How long a synchronous broker round trip (declare, bind, consume…) may take before the
    /// connection is considered dead.
    public var rpcTimeout: Duration
    /// The owner thread's longest sleep between two looks at the socket when nothing happens.
    /// Commands (a close among them) and arriving frames wake it at once, and held acks set their
    /// own deadlines, so this bounds only how late a heartbeat goes out (heartbeats are due every
    /// `heartbeat` / 2, 15 s by default). 250 ms: at 50 ms the wake-ups cost about 1.7 ms of CPU a
    /// second, two thirds of an idle one-bundle instance's (docs/benchmarks.md).
    public var pollInterval: Duration
    /// The largest frame this client accepts; the broker's offer is taken when it is smaller
    /// (RabbitMQ's default: 128 KiB). The broker never splits a content header, and sends one as
    /// large as its own frame_max allows whatever a client asked for: at 16 KiB, a publisher's
    /// 17 KiB of headers made librabbitmq refuse the frame and drop the connection, and the
    /// redelivered message did it again, forever. So this is a sanity bound, not a
    /// saving; memory per message is bounded elsewhere (properties over 16 KiB are not kept,
    /// `AMQPProperties.maximumEncodedSize`; bodies by the consumer's `maxBodySize`). librabbitmq
    /// keeps a page of the frame size per channel it decoded a frame on; only what a frame
    /// fills of it is touched.
    public var frameMax: Int = 1 << 20

    public init(
        urls: [AMQPURL], connectionName: String = "apns-worker", heartbeat: Duration = .seconds(30),
        tls: AMQPTLSConfiguration = AMQPTLSConfiguration(), backoff: AMQPBackoff = AMQPBackoff(),
        connectTimeout: Duration = .seconds(10), rpcTimeout: Duration = .seconds(30),
        pollInterval: Duration = .milliseconds(250)
    ) {
        self.urls = urls
        self.connectionName = connectionName
        self.heartbeat = heartbeat
        self.tls = tls
        self.backoff = backoff
        self.connectTimeout = connectTimeout
        self.rpcTimeout = rpcTimeout
        self.pollInterval = pollInterval
    }

    /// The same settings under another connection name (the admin's sessions beside the worker's).
    public func named(_ connectionName: String) -> AMQPConfiguration {
        var configuration = self
        configuration.connectionName = connectionName
        return configuration
    }

    /// Parses each URL string (the `[amqp] url` lines of the configuration file).
    public init(urlStrings: [String], connectionName: String = "apns-worker") throws(AMQPError) {
        guard !urlStrings.isEmpty else { throw AMQPError(.invalidURL, "no AMQP URL given") }
        var urls: [AMQPURL] = []
        for string in urlStrings { urls.append(try AMQPURL(string: string)) }
        self.init(urls: urls, connectionName: connectionName)
    }
}
