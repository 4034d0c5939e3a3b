/// The simulator's legacy listeners, as Apple ran them until 2021: the binary provider gateway
/// (port 2195) and the feedback service (port 2196), both TLS with a required client
/// certificate. Protocol bytes only; what a frame gets is decided by `SimulatorEngine`.
///
/// Apple's gateway, and so this one: frames are read in order; a frame that fails (strict
/// decoding, a scripted or injected status) gets one error response (command 8, status, the
/// frame's identifier) and the connection closes; every byte after that frame is discarded
/// unread, including frames already received in the same TCP segment. Success is never
/// answered. A frame with no identifier item is named 0. The old command 0 and 1 formats are
/// refused with 128, which the worker never sends.
import APNSBinaryProtocol
import APNSModel
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import SwiftASN1
import X509

/// What the frame decoder hands the gateway handler.
enum BinaryGatewayInput {
    case frame(AppleBinaryProtocol.Frame)
    case invalid(AppleBinaryProtocol.Refusal)
}

/// Splits the byte stream into frames with the simulator's own strict reader. After the first
/// frame it refuses, every later byte is dropped: Apple answers the first fault and reads no
/// further.
final class BinaryFrameSplitter: ByteToMessageDecoder {
    typealias InboundOut = BinaryGatewayInput

    private var refused = false

    func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard !refused else {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return .needMoreData
        }
        switch AppleBinaryProtocol.readFrame(from: &buffer) {
        case .needMoreData:
            return .needMoreData
        case .frame(let frame):
            context.fireChannelRead(wrapInboundOut(.frame(frame)))
            return .continue
        case .refused(let error):
            refused = true
            buffer.moveReaderIndex(to: buffer.writerIndex)
            context.fireChannelRead(wrapInboundOut(.invalid(error)))
            return .needMoreData
        }
    }

    func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // A frame cut off by the close was never complete: Apple never processed it either.
        buffer.moveReaderIndex(to: buffer.writerIndex)
        return .needMoreData
    }
}

/// One binary gateway connection: asks the engine about each frame and carries out the answer.
final class BinaryGatewayHandler: ChannelInboundHandler {
    typealias InboundIn = BinaryGatewayInput
    typealias OutboundOut = ByteBuffer

    private let engine: SimulatorEngine
    private let logger: Logger
    private var framesProcessed = 0
    /// Set once the connection's end is decided: nothing more is processed.
    private var closing = false
    private var topic: String?

    init(engine: SimulatorEngine, logger: Logger) {
        self.engine = engine
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        framesProcessed += 1
        switch unwrapInboundIn(data) {
        case .invalid(let refusal):
            engine.binaryFrameRefused(refusal)
            logger.debug("binary gateway refused a frame", metadata: ["binary.status": "\(refusal.status)", "error": "\(refusal.reason)"])
            closeAfter(status: refusal.status, identifier: refusal.identifier, context: context)
        case .frame(let frame):
            let topic = self.topic ?? Self.peerTopic(context: context)
            self.topic = topic
            let identifier = frame.identifier ?? 0
            switch engine.decideBinary(frame, ordinal: framesProcessed, topic: topic) {
            case .accept:
                break
            case .acceptAndShutdown:
                closeAfter(status: AppleBinaryProtocol.Status.shutdown, identifier: identifier, context: context)
            case .acceptAndCloseSilently:
                closing = true
                context.close(promise: nil)
            case .reject(let status):
                closeAfter(status: status, identifier: identifier, context: context)
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func closeAfter(status: UInt8, identifier: UInt32, context: ChannelHandlerContext) {
        closing = true
        let channel = context.channel
        var response = channel.allocator.buffer(capacity: 6)
        AppleBinaryProtocol.writeErrorResponse(status: status, identifier: identifier, into: &response)
        context.writeAndFlush(wrapOutboundOut(response)).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    /// The bundle ID in the client certificate's common name (`Apple Push Services: <bundle>`),
    /// as Apple took the topic from the certificate; the whole common name if it has no prefix.
    static func peerTopic(context: ChannelHandlerContext) -> String {
        guard let certificate = try? context.pipeline.syncOperations.nioSSL_peerCertificate(),
            let der = try? certificate.toDERBytes(),
            let parsed = try? Certificate(derEncoded: der)
        else { return "" }
        let commonName = parsed.subject.flatMap { $0 }.first { $0.type == ASN1ObjectIdentifier.RDNAttributeType.commonName }
            .map { String(describing: $0.value) } ?? ""
        guard let separator = commonName.range(of: ": ") else { return commonName }
        return String(commonName[separator.upperBound...])
    }
}

/// One feedback service connection: once the TLS handshake is done, writes every tuple queued
/// for the app its client certificate names (and those queued for any app), and closes. What the peer sends is ignored, as Apple did.
final class FeedbackServiceHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let engine: SimulatorEngine

    init(engine: SimulatorEngine) { self.engine = engine }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent {
            let tuples = engine.takeQueuedFeedback(topic: BinaryGatewayHandler.peerTopic(context: context))
            let channel = context.channel
            var bytes = channel.allocator.buffer(capacity: tuples.count * 38)
            for (_, tuple) in tuples {
                AppleBinaryProtocol.writeFeedbackTuple(timestamp: tuple.timestamp, token: tuple.deviceToken, into: &bytes)
            }
            let engine = self.engine
            context.writeAndFlush(wrapOutboundOut(bytes)).whenComplete { result in
                // Unsent tuples stay queued for the next poll.
                if case .failure = result { engine.returnQueuedFeedback(tuples) }
                channel.close(promise: nil)
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Binding the legacy listeners.
extension APNSSimulator {
    /// The TLS server configuration of the legacy listeners: no ALPN, a client certificate
    /// signed by the client CA required.
    static func makeLegacyTLSConfiguration(_ tls: SimulatorTLSConfiguration) throws -> TLSConfiguration {
        guard let caPEM = tls.clientCAPEM else {
            throw SimulatorConfigurationError(
                description: "the binary gateway and the feedback service need tls.clientCAPEM to verify client certificates")
        }
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(tls.certificateChainPEM.utf8)).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(bytes: Array(tls.privateKeyPEM.utf8), format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(caPEM.utf8)))
        configuration.certificateVerification = .noHostnameVerification
        // After an error response the peer usually keeps writing and never answers our
        // close_notify; do not hold the socket open for long waiting for it.
        configuration.shutdownTimeout = .milliseconds(200)
        return configuration
    }

    static func bindLegacyListener(
        group: any EventLoopGroup, host: String, port: Int, sslContext: NIOSSLContext, registry: ConnectionRegistry, logger: Logger,
        handlers: @escaping @Sendable () -> [any ChannelHandler]
    ) async throws -> any Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(NIOSSLServerHandler(context: sslContext))
                    for handler in handlers() { try pipeline.addHandler(handler) }
                    try pipeline.addHandler(ConnectionObserver(connection: ConnectionState(), registry: registry, logger: logger))
                }
            }
            .bind(host: host, port: port)
            .get()
    }
}

/// A simulator configuration that cannot be started.
public struct SimulatorConfigurationError: Error, CustomStringConvertible {
    public var description: String
}
