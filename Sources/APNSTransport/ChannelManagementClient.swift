/// The client of Apple's channel management service for broadcast push (contract §7): one TLS +
/// HTTP/2 connection per call to the service's own host and port, authenticated as the bundle's
/// provider API connections are (the same provider token source, or the same client
/// certificate). Channel operations are rare operator actions (a CLI command, an admin request),
/// so no connection is kept between calls; the requests and answers are values of
/// `APNSChannelManagement`.
import APNSChannelManagement
import APNSModel
import APNSProviderToken
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL

public struct ChannelManagementConfiguration: Sendable {
    public var bundleID: String
    public var environment: APNSEnvironment
    /// Default: Apple's channel management host for `environment`.
    public var host: String
    /// Default: Apple's port for `environment` (2196 production, 2195 development).
    public var port: Int
    public var trustRoots: TLSTrustRoots = .system
    public var authentication: HTTP2TransportConfiguration.Authentication
    /// Connect, handshake, request and answer together.
    public var timeout: Duration = .seconds(15)

    public init(
        bundleID: String, environment: APNSEnvironment, authentication: HTTP2TransportConfiguration.Authentication,
        host: String? = nil, port: Int? = nil
    ) {
        self.bundleID = bundleID
        self.environment = environment
        self.authentication = authentication
        self.host = host ?? environment.channelManagementHost
        self.port = port ?? environment.channelManagementPort
    }
}

public struct ChannelManagementClient: Sendable {
    public let configuration: ChannelManagementConfiguration
    private let eventLoopGroup: any EventLoopGroup

    public init(configuration: ChannelManagementConfiguration, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
    }

    /// Creates a channel; its id as Apple issued it.
    public func create(storagePolicy: ChannelStoragePolicy) async throws(ChannelManagementError) -> BroadcastChannel {
        guard case .created(let channel) = try await perform(.create(storagePolicy: storagePolicy)) else { throw Self.mismatch }
        return channel
    }

    /// A channel's storage policy.
    public func read(_ channel: BroadcastChannel) async throws(ChannelManagementError) -> ChannelStoragePolicy {
        guard case .channel(_, let policy) = try await perform(.read(channel)) else { throw Self.mismatch }
        return policy
    }

    public func delete(_ channel: BroadcastChannel) async throws(ChannelManagementError) {
        guard case .deleted = try await perform(.delete(channel)) else { throw Self.mismatch }
    }

    /// Every channel of the bundle in this environment.
    public func list() async throws(ChannelManagementError) -> [BroadcastChannel] {
        guard case .channels(let channels) = try await perform(.list) else { throw Self.mismatch }
        return channels
    }

    private static let mismatch = ChannelManagementError(status: 0, reason: "the answer does not fit the request")

    /// One request on a connection of its own.
    public func perform(_ operation: ChannelOperationRequest) async throws(ChannelManagementError) -> ChannelManagementResult {
        let authorization: String?
        switch configuration.authentication {
        case .token(let source):
            do { authorization = try source.token().authorization } catch {
                throw ChannelManagementError(status: 0, reason: "cannot sign a provider token: \(error)")
            }
        case .certificate:
            authorization = nil
        }
        let request = ChannelManagementRequest(
            operation, bundleID: configuration.bundleID, authority: configuration.host, authorization: authorization, requestID: UUID())
        let answer: RawAnswer
        do {
            answer = try await exchange(request)
        } catch {
            throw ChannelManagementError(
                status: 0, reason: "cannot reach the channel management service at \(configuration.host):\(configuration.port): \(error)")
        }
        return try request.result(status: answer.status, headers: answer.headers, body: answer.body).get()
    }

    struct RawAnswer: Sendable {
        var status: Int
        var headers: [HTTP2HeaderField]
        var body: [UInt8]
    }

    private func exchange(_ request: ChannelManagementRequest) async throws -> RawAnswer {
        var certificate: (certFile: String, keyFile: String)?
        if case .certificate(let certFile, let keyFile) = configuration.authentication { certificate = (certFile, keyFile) }
        let tls = try ClientTLS.makeContext(trustRoots: configuration.trustRoots, certificate: certificate, applicationProtocols: ["h2"])
        let host = configuration.host
        let timeout = configuration.timeout.timeAmount
        // TLS and HTTP/2 go into the pipeline before the connection is up: added afterwards, the
        // server's first frames could pass a pipeline without them and be lost (seen under load).
        let channel = try await ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(timeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ClientTLS.handler(context: tls, host: host))
                    // The server opens no streams of its own (no push): refuse any it would.
                    _ = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                        mode: .client, connectionConfiguration: .init(), streamConfiguration: .init()
                    ) { stream in stream.close() }
                }
            }
            .connect(host: host, port: configuration.port).get()
        defer { channel.close(promise: nil) }
        let promise = channel.eventLoop.makePromise(of: RawAnswer.self)
        channel.eventLoop.scheduleTask(in: timeout) { promise.fail(ChannelManagementTimeout()) }
        try await channel.eventLoop.submit {
            let multiplexer = try channel.pipeline.syncOperations.handler(type: NIOHTTP2Handler.self).syncMultiplexer()
            multiplexer.createStreamChannel(promise: nil) { stream in
                stream.eventLoop.makeCompletedFuture {
                    try stream.pipeline.syncOperations.addHandler(OneRequestHandler(request: request, promise: promise))
                }
            }
        }.get()
        return try await promise.futureResult.get()
    }
}

struct ChannelManagementTimeout: Error, CustomStringConvertible {
    var description: String { "no answer in time" }
}

/// Writes one request on its stream and collects the answer to END_STREAM.
private final class OneRequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private let request: ChannelManagementRequest
    private let promise: EventLoopPromise<ChannelManagementClient.RawAnswer>
    private var answer = ChannelManagementClient.RawAnswer(status: 0, headers: [], body: [])
    /// The largest answer kept: a list of 10,000 channels is about 300 KB.
    private static let maximumBody = 2 * 1024 * 1024

    init(request: ChannelManagementRequest, promise: EventLoopPromise<ChannelManagementClient.RawAnswer>) {
        self.request = request
        self.promise = promise
    }

    func channelActive(context: ChannelHandlerContext) {
        let headers = HPACKHeaders(request.headers.map { ($0.name, $0.value) })
        let hasBody = !request.body.isEmpty
        context.write(wrapOutboundOut(.headers(.init(headers: headers, endStream: !hasBody))), promise: nil)
        if hasBody {
            let buffer = context.channel.allocator.buffer(bytes: request.body)
            context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(buffer), endStream: true))), promise: nil)
        }
        context.flush()
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var endStream = false
        switch unwrapInboundIn(data) {
        case .headers(let frame):
            for (name, value, _) in frame.headers {
                if name == ":status" { answer.status = Int(value) ?? 0 } else { answer.headers.append(.init(name, value)) }
            }
            endStream = frame.endStream
        case .data(let frame):
            if case .byteBuffer(let buffer) = frame.data, answer.body.count + buffer.readableBytes <= Self.maximumBody {
                answer.body.append(contentsOf: buffer.readableBytesView)
            }
            endStream = frame.endStream
        default:
            break
        }
        if endStream { promise.succeed(answer) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(error)
        context.close(promise: nil)
    }
}
