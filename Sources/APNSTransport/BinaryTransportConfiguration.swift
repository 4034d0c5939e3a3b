/// How a `BinaryTransport` reaches a binary provider gateway (Apple's legacy port 2195 API) and
/// authenticates: a value type with documented defaults.
import APNSModel
import NIOSSL

/// Configuration of one `BinaryTransport` (one certificate and environment).
public struct BinaryTransportConfiguration: Sendable {
    public var environment: APNSEnvironment
    /// Default: Apple's gateway for `environment`. The server certificate is verified against it.
    public var host: String
    public var port: Int = 2195
    /// The TLS client certificate (PEM) the gateway identifies the provider by, and its key.
    public var certFile: String
    public var keyFile: String
    public var trustRoots: TLSTrustRoots = .system
    /// How long after a frame is written Apple's silence counts as delivery. Longer than the
    /// round trip to the gateway, or an error response could arrive for a frame already
    /// reported delivered (it is then logged and everything held is written again).
    public var holdWindow: Duration = .seconds(1)
    /// Frames held per connection waiting for their hold window; more sends wait. Bounds the
    /// throughput of one connection to `bufferCapacity / holdWindow` frames per second.
    public var bufferCapacity: Int = 10_000
    /// Independent connections, each with its own buffer; sends are spread round robin.
    public var connections: Int = 1
    /// Connect only when the first notification is sent, not at start-up: for the environment a
    /// bundle only uses when a job asks for it. Until then the connections report `idle`.
    public var connectOnFirstUse = false
    /// TCP connect plus TLS handshake.
    public var connectTimeout: Duration = .seconds(10)
    /// A send still waiting for a connection after this long fails with `connectFailed` at the
    /// next failed connection attempt (its job is retried later).
    public var maxQueueWait: Duration = .seconds(10)
    /// Delay before the first reconnect attempt after a failure; doubles up to `reconnectMaxDelay`.
    public var reconnectInitialDelay: Duration = .milliseconds(100)
    public var reconnectMaxDelay: Duration = .seconds(30)

    public init(environment: APNSEnvironment, certFile: String, keyFile: String, host: String? = nil, port: Int = 2195) {
        self.environment = environment
        self.certFile = certFile
        self.keyFile = keyFile
        self.host = host ?? (environment == .sandbox ? "gateway.sandbox.push.apple.com" : "gateway.push.apple.com")
        self.port = port
    }

    /// Full verification, the client certificate, no ALPN (the binary API predates it).
    func makeTLSContext() throws -> NIOSSLContext {
        try ClientTLS.makeContext(trustRoots: trustRoots, certificate: (certFile, keyFile), applicationProtocols: [])
    }
}
