// Connection settings of AMQPClient: the failover list of broker URLs (parsed and
// percent-decoded here, without IO), TLS, heartbeats and the reconnect backoff policy.
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
    /// default vhost `/`; `/%2f` is `/` too; `/name` is `name`.
    public init(string: String) throws(AMQPError) {
        func invalid(_ why: String) -> AMQPError {
            AMQPError(.invalidURL, "invalid AMQP URL '\(Self.redacting(string))': \(why)")
        }
        // A scheme is case-insensitive (RFC 3986 §3.1): `AMQPS://h` is `amqps://h`, as the
        // configuration's check and its plaintext warning read it (they lower-case the URL).
        func hasScheme(_ prefix: String) -> Bool { string.prefix(prefix.count).lowercased() == prefix }
        let tls: Bool
        var rest: Substring
        if hasScheme("amqp://") {
            tls = false
            rest = string.dropFirst("amqp://".count)
        } else if hasScheme("amqps://") {
            tls = true
            rest = string.dropFirst("amqps://".count)
        } else {
            throw invalid("the scheme must be amqp:// or amqps://")
        }
        var vhost = "/"
        if let slash = rest.firstIndex(of: "/") {
            let path = rest[rest.index(after: slash)...]
            guard !path.contains("/") else { throw invalid("the vhost must be one path segment (write / as %2f)") }
            guard let decoded = Self.percentDecoded(path) else { throw invalid("bad percent-encoding in the vhost") }
            vhost = decoded
            rest = rest[..<slash]
        }
        var user = "guest", password = "guest"
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let parts = userInfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let u = Self.percentDecoded(parts[0]) else { throw invalid("bad percent-encoding in the user") }
            user = u
            if parts.count == 2 {
                guard let p = Self.percentDecoded(parts[1]) else { throw invalid("bad percent-encoding in the password") }
                password = p
            }
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw invalid("unterminated IPv6 address") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw invalid("junk after the IPv6 address") }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard let decodedHost = Self.percentDecoded(host) else { throw invalid("bad percent-encoding in the host") }
        var port: Int?
        if let portText {
            guard let p = Int(portText), (1...65535).contains(p) else { throw invalid("the port must be 1…65535") }
            port = p
        }
        self.init(tls: tls, host: decodedHost.isEmpty ? "localhost" : decodedHost, port: port, user: user, password: password, vhost: vhost)
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

    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
                bytes.append(high << 4 | low)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

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
    /// PEM file of the certificate authorities to trust; nil = the system's bundle.
    public var caFile: String?
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
    static let systemBundle = "/etc/ssl/certs/ca-certificates.crt"
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
    /// redelivered message did it again, forever (issue 35). So this is a sanity bound, not a
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

    /// Parses each URL string (the `[amqp] url` lines of the configuration file).
    public init(urlStrings: [String], connectionName: String = "apns-worker") throws(AMQPError) {
        guard !urlStrings.isEmpty else { throw AMQPError(.invalidURL, "no AMQP URL given") }
        var urls: [AMQPURL] = []
        for string in urlStrings { urls.append(try AMQPURL(string: string)) }
        self.init(urls: urls, connectionName: connectionName)
    }
}
