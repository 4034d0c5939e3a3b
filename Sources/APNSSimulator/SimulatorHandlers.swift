/// The simulator's channel handlers: protocol bytes only. `ConnectionObserver` notes a TLS
/// connection's life and client certificate; `StreamHandler` reads one HTTP/2 request, asks the
/// engine what to do and writes the answer (or resets, or drops the connection).
import APNSModel
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import Synchronization

/// Sits between TLS and HTTP/2 on every connection: registers it while it is open.
final class ConnectionObserver: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let connection: ConnectionState
    private let registry: ConnectionRegistry
    private let logger: Logger

    init(connection: ConnectionState, registry: ConnectionRegistry, logger: Logger) {
        self.connection = connection
        self.registry = registry
        self.logger = logger
    }

    func channelActive(context: ChannelHandlerContext) {
        registry.opened(context.channel)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        registry.closed(context.channel)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("simulator connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }
}

/// One HTTP/2 stream: one APNs request.
final class StreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    /// Bodies are kept up to this size; beyond it only the length counts (413 anyway).
    static let maximumKeptBody = 64 * 1024
    /// After the last answer on a connection that sent GOAWAY, wait this long before closing so
    /// the answer leaves the socket first.
    static let goawayCloseDelay: TimeAmount = .milliseconds(50)

    /// Which of Apple's services the listener plays.
    enum Service: Sendable {
        /// The provider API: device notifications and broadcasts.
        case push
        /// The channel management service (its own host and port at Apple).
        case channelManagement
    }

    private let engine: SimulatorEngine
    private let connection: ConnectionState
    private let admission: ConnectionState.StreamAdmission
    private let service: Service
    private var request = SimulatorRequest(method: nil, path: nil, headers: [], body: [], bodyLength: 0)
    private var sawHeaders = false
    private var decided = false

    init(engine: SimulatorEngine, connection: ConnectionState, admission: ConnectionState.StreamAdmission, service: Service = .push) {
        self.engine = engine
        self.connection = connection
        self.admission = admission
        self.service = service
    }

    func channelActive(context: ChannelHandlerContext) {
        // A refused stream is left unanswered: the GOAWAY tells the peer it was not processed.
        if admission == .refuse { engine.updateCounters { $0.refusedStreams += 1 } }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !decided { requestRead(context: context) }
        if admission != .refuse, connection.streamClosed(), let parent = context.channel.parent {
            // The GOAWAY went onto the loop's task queue when the last request was read, before
            // this; queuing the delay behind it keeps the close after it even when a busy loop
            // runs due timers ahead of queued tasks.
            parent.eventLoop.execute {
                parent.eventLoop.scheduleTask(in: Self.goawayCloseDelay) { parent.close(promise: nil) }
            }
        }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard admission != .refuse, !decided else { return }
        switch unwrapInboundIn(data) {
        case .headers(let headers):
            if !sawHeaders {
                sawHeaders = true
                for (name, value, _) in headers.headers {
                    switch name {
                    case ":method": request.method = value
                    case ":path": request.path = value
                    case _ where name.hasPrefix(":"): break
                    default: request.headers.append((name: name, value: value))
                    }
                }
            }
            if headers.endStream { requestComplete(context: context) }
        case .data(let data):
            if case .byteBuffer(var buffer) = data.data {
                request.bodyLength += buffer.readableBytes
                let room = Self.maximumKeptBody - request.body.count
                if room > 0, let bytes = buffer.readBytes(length: min(room, buffer.readableBytes)) {
                    request.body.append(contentsOf: bytes)
                }
            }
            if data.endStream { requestComplete(context: context) }
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private var ordinal: Int {
        switch admission {
        case .process(let ordinal), .processAndGoAway(let ordinal): return ordinal
        case .refuse: return 0
        }
    }

    /// Counts this stream's request as read; sends the GOAWAY when it was the last one owed.
    private func requestRead(context: ChannelHandlerContext) {
        guard admission != .refuse, let last = connection.requestRead(), let parent = context.channel.parent else { return }
        // Sent on the next loop turn: the HTTP/2 handler is in the middle of a read.
        parent.eventLoop.execute { [engine] in
            var debugData = parent.allocator.buffer(capacity: 32)
            debugData.writeString("{\"reason\":\"Shutdown\"}")
            let goaway = HTTP2Frame(
                streamID: .rootStream,
                payload: .goAway(lastStreamID: HTTP2StreamID(last), errorCode: .noError, opaqueData: debugData))
            parent.writeAndFlush(goaway, promise: nil)
            engine.updateCounters { $0.goawaysSent += 1 }
        }
    }

    private func requestComplete(context: ChannelHandlerContext) {
        decided = true
        requestRead(context: context)
        if connection.hasClientCertificate == nil, let parent = context.channel.parent {
            // The handshake is long over when a request arrives; the TLS handler only lets a
            // certificate through that verified against the client CA.
            let certificate = try? parent.pipeline.syncOperations.nioSSL_peerCertificate()
            connection.hasClientCertificate = certificate != nil
        }
        let decision =
            switch service {
            case .push: engine.decide(request, connection: connection, ordinal: ordinal)
            case .channelManagement: engine.decideChannelManagement(request, connection: connection)
            }
        switch decision {
        case .dropConnection:
            (context.channel.parent ?? context.channel).close(promise: nil)
        case .neverAnswer:
            break
        case .respond(let response, let delay, let raiseStreamLimit):
            if let raiseStreamLimit, let parent = context.channel.parent {
                let settings = HTTP2Frame(
                    streamID: .rootStream,
                    payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: raiseStreamLimit)])))
                parent.writeAndFlush(settings, promise: nil)
            }
            if delay > .zero {
                context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(delay)) {
                    self.write(response, context: context)
                }
            } else {
                write(response, context: context)
            }
        }
    }

    private func write(_ response: SimulatorResponse, context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(response.status))
        headers.add(name: response.idHeader, value: response.apnsID)
        if let uniqueID = response.uniqueID { headers.add(name: "apns-unique-id", value: uniqueID) }
        for field in response.extraHeaders { headers.add(name: field.name, value: field.value) }
        guard let body = response.body else {
            context.writeAndFlush(wrapOutboundOut(.headers(.init(headers: headers, endStream: true))), promise: nil)
            return
        }
        headers.add(name: "content-type", value: "application/json; charset=utf-8")
        headers.add(name: "content-length", value: String(body.utf8.count))
        context.write(wrapOutboundOut(.headers(.init(headers: headers))), promise: nil)
        let buffer = context.channel.allocator.buffer(string: body)
        context.writeAndFlush(wrapOutboundOut(.data(.init(data: .byteBuffer(buffer), endStream: true))), promise: nil)
    }
}

/// The open connections of one listener, so the simulator can close them at shutdown and tell
/// the HTTP/2 ones about a new stream limit.
final class ConnectionRegistry: Sendable {
    /// Which listener's connections, for the counters.
    enum Listener {
        case http2, binary, feedback, channelManagement
    }

    private let channels = Mutex<[ObjectIdentifier: any Channel]>([:])
    private let engine: SimulatorEngine
    private let listener: Listener

    init(engine: SimulatorEngine, listener: Listener = .http2) {
        self.engine = engine
        self.listener = listener
    }

    func opened(_ channel: any Channel) {
        channels.withLock { $0[ObjectIdentifier(channel)] = channel }
        switch listener {
        case .http2:
            engine.updateCounters {
                $0.connections += 1
                $0.openConnections += 1
            }
        case .binary:
            engine.updateCounters {
                $0.binaryConnections += 1
                $0.openBinaryConnections += 1
            }
        case .feedback, .channelManagement:
            // Feedback: counted when served (`SimulatorEngine.takeQueuedFeedback`); channel management:
            // its requests are counted (`channelRequests`), not its connections.
            break
        }
    }

    func closed(_ channel: any Channel) {
        let removed = channels.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }
        guard removed != nil else { return }
        switch listener {
        case .http2: engine.updateCounters { $0.openConnections -= 1 }
        case .binary: engine.updateCounters { $0.openBinaryConnections -= 1 }
        case .feedback, .channelManagement: break
        }
    }

    var all: [any Channel] { channels.withLock { Array($0.values) } }
}
