/// A client of Apple's legacy feedback service (port 2196): one TLS connection with the
/// provider's client certificate, every tuple the service writes until it closes, strictly
/// decoded. The service forgets what it served, so the caller must keep what `fetch` returns.
import APNSBinaryProtocol
import Logging
import NIOCore
import NIOPosix
import NIOSSL

public struct BinaryFeedbackClient: Sendable {
    public struct Configuration: Sendable {
        /// Apple's was `feedback.push.apple.com` (`feedback.sandbox.push.apple.com`); the server
        /// certificate is verified against this name.
        public var host: String
        public var port: Int
        /// The provider certificate and its key, PEM files.
        public var certFile: String
        public var keyFile: String
        /// Trust only this PEM file for the server's certificate; nil trusts the system's roots.
        public var caFile: String?
        /// Connect, handshake and read everything; then `fetch` fails.
        public var timeout: Duration
        /// Tuples one fetch keeps; past them the connection is closed unread (logged).
        public var maximumTuples: Int

        public init(
            host: String, port: Int = 2196, certFile: String, keyFile: String, caFile: String? = nil, timeout: Duration = .seconds(30),
            maximumTuples: Int = FeedbackStreamDecoder.defaultMaximumTuples
        ) {
            self.maximumTuples = maximumTuples
            self.host = host
            self.port = port
            self.certFile = certFile
            self.keyFile = keyFile
            self.caFile = caFile
            self.timeout = timeout
        }
    }

    public struct Error: Swift.Error, CustomStringConvertible {
        public var description: String
    }

    public let configuration: Configuration
    private let logger: Logger
    private let tlsContext: NIOSSLContext

    /// Loads the credentials now, so a bad file fails at start-up rather than at the first poll.
    public init(configuration: Configuration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .fullVerification
        tls.trustRoots = configuration.caFile.map { .file($0) } ?? .default
        tls.certificateChain = try NIOSSLCertificate.fromPEMFile(configuration.certFile).map { .certificate($0) }
        tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: configuration.keyFile, format: .pem))
        self.tlsContext = try NIOSSLContext(configuration: tls)
    }

    /// Connects, reads every tuple until the service closes, and returns them in order.
    public func fetch() async throws -> [FeedbackTuple] {
        let timeout = configuration.timeout
        return try await withThrowingTaskGroup(of: [FeedbackTuple]?.self) { group in
            group.addTask { try await self.readAll() }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let tuples = first else {
                throw Error(description: "feedback service \(configuration.host):\(configuration.port) did not finish within \(timeout)")
            }
            return tuples
        }
    }

    private func readAll() async throws -> [FeedbackTuple] {
        let tlsContext = self.tlsContext
        let host = configuration.host
        let connectTimeout = configuration.timeout.timeAmount
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(connectTimeout)
            .connect(host: configuration.host, port: configuration.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(ClientTLS.handler(context: tlsContext, host: host))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        let maximumTuples = configuration.maximumTuples
        let (tuples, full) = try await channel.executeThenClose { inbound, _ in
            var decoder = FeedbackStreamDecoder(maximumTuples: maximumTuples)
            var tuples: [FeedbackTuple] = []
            do {
                for try await buffer in inbound {
                    tuples += try decoder.feed(buffer.readableBytesView)
                    // Closing here is the only way to stop a peer that keeps writing.
                    if decoder.isFull { break }
                }
            } catch NIOSSLError.uncleanShutdown {
                // A TCP close without close_notify still ends the stream; `finish` decides
                // whether it ended on a tuple boundary.
            }
            try decoder.finish()
            return (tuples, decoder.isFull)
        }
        if full {
            logger.warning(
                "the feedback service sent more tuples than one fetch keeps; the connection was closed and the rest not read",
                metadata: ["feedback.host": "\(configuration.host)", "feedback.kept": "\(tuples.count)"])
        }
        logger.debug(
            "feedback service read",
            metadata: ["feedback.host": "\(configuration.host)", "feedback.port": "\(configuration.port)", "feedback.tuples": "\(tuples.count)"])
        return tuples
    }
}
