/// The per-connection HTTP/2 protocol work of the APNs client, as one channel handler after
/// `NIOHTTP2Handler` (no child channels, like pushy's handler on Netty): it opens a stream per
/// request, collects the answer, enforces the request deadline, reads SETTINGS and GOAWAY, and
/// keeps an idle connection alive with PINGs. What to do with a connection (how many streams it
/// may carry, when to replace it) is decided by the pool from the events this handler reports.
import APNSModel
import NIOCore
import NIOHPACK
import NIOHTTP2

/// What became of one request on one connection.
enum StreamResult: Sendable, Hashable {
    /// APNs answered.
    case answer(HTTPAnswer)
    /// The server never processed the stream (GOAWAY with a lower last-stream-id, or the
    /// connection was already closing): safe to send again on another connection.
    case notProcessed
    /// No answer, and the server may have seen the request.
    case failed(TransportFailure)
}

/// A request handed to the connection, with what to call with its result.
struct StreamRequest: Sendable {
    var request: HTTP2Request
    var deadline: NIODeadline
    /// Called exactly once, on the connection's event loop. A closure, not a promise: a
    /// callback added to a future from another thread costs the event loop a task of its own,
    /// one per notification.
    var onResult: @Sendable (StreamResult) -> Void
}

/// Connection-level news for the pool.
enum HTTP2ConnectionEvent: Sendable, Hashable {
    /// A SETTINGS frame from the server; nil when it did not set MAX_CONCURRENT_STREAMS.
    /// The first one means the connection is usable.
    case settings(maxConcurrentStreams: Int?)
    /// The server will take no new streams on this connection.
    case goaway(lastStreamID: Int, errorCode: UInt32)
    /// This side used its last stream id (`HTTP2ConnectionHandler.lastStreamIDToUse`): the
    /// connection takes no new streams, finishes the ones it has and closes, as after a GOAWAY.
    case retiring(lastStreamID: Int)
}

final class HTTP2ConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = Never
    typealias OutboundIn = StreamRequest
    typealias OutboundOut = HTTP2Frame

    private struct InFlight {
        var onResult: @Sendable (StreamResult) -> Void
        var deadline: NIODeadline
        var status: Int?
        var headers: [HTTP2HeaderField] = []
        var body: ByteBuffer?
    }

    /// The last client stream id a connection opens before it retires. Stream ids are 31 bits
    /// and never reused (RFC 9113 §5.1.1), so a long-lived connection would run out after about
    /// 2^30 requests; it is retired with room to spare, the way a GOAWAY retires it, and the
    /// pool opens a new one.
    static let lastStreamIDToUse = HTTP2StreamID(Int32.max - (1 << 20))

    private let pingInterval: TimeAmount
    private let lastStreamIDToUse: HTTP2StreamID
    private let onEvent: @Sendable (HTTP2ConnectionEvent) -> Void
    /// Under `NIOHTTP2Handler` (above TLS on real connections).
    private let batchFlush: BatchFlushHandler
    private var context: ChannelHandlerContext?
    private var streams: [HTTP2StreamID: InFlight] = [:]
    private var nextStreamID: HTTP2StreamID
    private var goawayLastStreamID: HTTP2StreamID?
    private var closed = false
    private var lastReadAt = NIODeadline.uptimeNanoseconds(0)
    private var pingOutstanding = false
    private var pingTask: Scheduled<Void>?
    private var pinging = false
    /// Expires streams past their deadline; runs every `deadlineResolution` while any stream
    /// has one, instead of a timer per request (a scheduled task per notification showed on
    /// the profile).
    private var deadlineSweep: Scheduled<Void>?
    static let deadlineResolution = TimeAmount.milliseconds(50)

    /// `firstStreamID` and `lastStreamIDToUse` are for tests that start near the end of the
    /// stream-id space.
    init(
        pingInterval: TimeAmount, firstStreamID: HTTP2StreamID = 1, lastStreamIDToUse: HTTP2StreamID = lastStreamIDToUse,
        batchFlush: BatchFlushHandler, onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) {
        self.pingInterval = pingInterval
        self.batchFlush = batchFlush
        self.nextStreamID = firstStreamID
        self.lastStreamIDToUse = lastStreamIDToUse
        self.onEvent = onEvent
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { startPinging(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        startPinging(context: context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        failAll(.failed(.connectionLost("handler removed")))
        self.context = nil
    }

    private func startPinging(context: ChannelHandlerContext) {
        guard !pinging else { return }
        pinging = true
        lastReadAt = context.eventLoop.now
        schedulePingTick(context: context)
    }

    // A quiet connection gets a PING each interval; one still unanswered a whole interval later
    // means the peer is gone without a FIN (NAT timeout, dead host): close and let the pool
    // replace it, rather than finding out from the next request's deadline.
    private func schedulePingTick(context: ChannelHandlerContext) {
        pingTask = context.eventLoop.assumeIsolated().scheduleTask(in: pingInterval) { [weak self] in
            guard let self, let context = self.context, !self.closed else { return }
            self.pingTick()
            self.schedulePingTick(context: context)
        }
    }

    private func pingTick() {
        guard let context, !closed else { return }
        if pingOutstanding {
            context.close(promise: nil)
            return
        }
        guard context.eventLoop.now - lastReadAt >= pingInterval else { return }
        pingOutstanding = true
        let frame = HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 0x6170_6e73), ack: false))
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }

    // MARK: outbound: one request → HEADERS + DATA on a new stream

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        promise?.succeed(())
        let request = unwrapOutboundIn(data)
        var bodies = Self.bodies(of: [request], allocator: context.channel.allocator)
        open(request, bodies: &bodies, context: context)
    }

    /// Opens a stream for each request (`HTTP2Connection` batches requests from other threads).
    /// Each request is flushed through NIOHTTP2 on its own, so the bodies leave in stream order,
    /// and TLS gets one flush for the batch (`BatchFlushHandler`). On a closed connection every
    /// request ends `.notProcessed`: nothing of it was sent.
    func send(_ requests: [StreamRequest]) {
        guard let context else {
            for request in requests { request.onResult(.notProcessed) }
            return
        }
        var bodies = Self.bodies(of: requests, allocator: context.channel.allocator)
        batchFlush.batchingFlushes {
            for request in requests {
                open(request, bodies: &bodies, context: context)
                context.flush()
            }
        }
    }

    /// The bodies of a batch in one buffer, in request order; each DATA frame is a slice of it
    /// (`open`): one allocation a batch instead of a buffer, two allocations, a request.
    private static func bodies(of requests: [StreamRequest], allocator: ByteBufferAllocator) -> ByteBuffer {
        var bodies = allocator.buffer(capacity: requests.reduce(0) { $0 + $1.request.body.count })
        for request in requests { bodies.writeBytes(request.request.body) }
        return bodies
    }

    /// Opens the request's stream; its body is the next `body.count` bytes of `bodies`, taken
    /// whether or not the stream opens, so the next request finds its own.
    private func open(_ request: StreamRequest, bodies: inout ByteBuffer, context: ChannelHandlerContext) {
        let body = bodies.readSlice(length: request.request.body.count)
        guard !closed, goawayLastStreamID == nil else {
            request.onResult(.notProcessed)
            return
        }
        let streamID = nextStreamID
        if streamID >= lastStreamIDToUse {
            // The last stream this connection opens: no later request may be written here.
            goawayLastStreamID = streamID
            onEvent(.retiring(lastStreamID: Int(streamID)))
        } else {
            nextStreamID = HTTP2StreamID(Int32(streamID) + 2)
        }

        streams[streamID] = InFlight(onResult: request.onResult, deadline: request.deadline)
        if request.deadline != .distantFuture { scheduleDeadlineSweep(context: context) }

        var headers = HPACKHeaders()
        headers.reserveCapacity(request.request.headers.count)
        for field in request.request.headers {
            headers.add(name: field.name, value: field.value, indexing: Self.indexing(of: field.name))
        }
        let endStream = request.request.body.isEmpty
        context.write(
            wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: endStream)))),
            promise: nil)
        if !endStream, let buffer = body {
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(buffer), endStream: true)))),
                promise: nil)
        }
    }

    private func scheduleDeadlineSweep(context: ChannelHandlerContext) {
        guard deadlineSweep == nil, !closed else { return }
        deadlineSweep = context.eventLoop.assumeIsolated().scheduleTask(in: Self.deadlineResolution) { [weak self] in
            guard let self, let context = self.context else { return }
            self.deadlineSweep = nil
            let now = context.eventLoop.now
            var pending = false
            for (id, stream) in self.streams where stream.deadline != .distantFuture {
                if stream.deadline <= now { self.deadlinePassed(id) } else { pending = true }
            }
            if pending { self.scheduleDeadlineSweep(context: context) }
        }
    }

    /// Values that change with every notification are not added to the HPACK dynamic table:
    /// each would evict entries that repeat (the provider token, the topic), which would then
    /// be sent in full again and re-indexed, for nothing.
    static func indexing(of name: String) -> HPACKIndexing {
        switch name {
        case "apns-id", "apns-request-id", ":path", "content-length", "apns-expiration", "apns-collapse-id": return .nonIndexable
        default: return .indexable
        }
    }

    private func deadlinePassed(_ streamID: HTTP2StreamID) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        stream.onResult(.failed(.timeout))
        if let context, !closed {
            // Tell the server we no longer care, so the stream slot is freed on both ends.
            context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))), promise: nil)
        }
        closeIfDrained()
    }

    // MARK: inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        lastReadAt = context.eventLoop.now
        if frame.streamID == .rootStream {
            connectionFrame(frame.payload, context: context)
            return
        }
        // Taken out, and put back only while the answer is incomplete: a copy out of the table
        // and back retained every field of the stream, twice a frame.
        guard var stream = streams.removeValue(forKey: frame.streamID) else { return }
        switch frame.payload {
        case .headers(let headers):
            if stream.status == nil {
                stream.status = headers.headers.first(name: ":status").flatMap { Int($0) }
                // Only what an answer reads: copying every header of every answer showed on
                // the profile.
                for header in headers.headers where HTTP2Response.readsHeader(named: header.name) {
                    stream.headers.append(HTTP2HeaderField(header.name, header.value))
                }
            }
            if headers.endStream { complete(stream) } else { streams[frame.streamID] = stream }
        case .data(let data):
            if case .byteBuffer(var bytes) = data.data {
                guard (stream.body?.readableBytes ?? 0) + bytes.readableBytes <= Self.maximumAnswerBody else {
                    answerTooLarge(frame.streamID, stream, context: context)
                    return
                }
                if stream.body == nil {
                    stream.body = bytes
                } else {
                    stream.body!.writeBuffer(&bytes)
                }
            }
            if data.endStream { complete(stream) } else { streams[frame.streamID] = stream }
        case .rstStream(.refusedStream):
            // RFC 9113 §8.7: REFUSED_STREAM guarantees the request was not processed.
            finish(stream, with: .notProcessed)
        case .rstStream(let code):
            finish(stream, with: .failed(.streamReset(UInt32(code.networkCode))))
        default:
            streams[frame.streamID] = stream
        }
    }

    /// The most of an answer's body a stream keeps. Apple's answers carry no body (200) or a
    /// JSON dictionary of `reason` and, with 410, `timestamp` ("Handling notification responses
    /// from APNs"): about 60 bytes. 4 KiB leaves room for a server that pretty-prints; a body
    /// larger than that is no APNs answer, and without a cap a peer (a proxy, a spoofed endpoint)
    /// could make each of up to 1,000 streams per connection hold as much as flow control lets it.
    static let maximumAnswerBody = 4096

    /// A body over `maximumAnswerBody`: the stream is reset (CANCEL: this side no longer wants it;
    /// NIOHTTP2 drops what still arrives for it) and ends as a transport fault, retried like any
    /// answer that cannot be read. The connection and its other streams go on.
    private func answerTooLarge(_ streamID: HTTP2StreamID, _ stream: InFlight, context: ChannelHandlerContext) {
        context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))), promise: nil)
        finish(stream, with: .failed(.malformedAnswer("answer body over \(Self.maximumAnswerBody) bytes")))
    }

    private func connectionFrame(_ payload: HTTP2Frame.FramePayload, context: ChannelHandlerContext) {
        switch payload {
        case .settings(.settings(let settings)):
            let max = settings.last { $0.parameter == .maxConcurrentStreams }.map { Int($0.value) }
            onEvent(.settings(maxConcurrentStreams: max))
        case .ping(_, ack: true):
            pingOutstanding = false
        case .goAway(let lastStreamID, let errorCode, _):
            goawayLastStreamID = lastStreamID
            // Streams above last-stream-id were never processed: hand them back for a new
            // connection. The others still get their answers on this one.
            for id in streams.keys where id > lastStreamID {
                finish(id, with: .notProcessed)
            }
            onEvent(.goaway(lastStreamID: Int(lastStreamID), errorCode: UInt32(errorCode.networkCode)))
            closeIfDrained()
        default:
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let closed as StreamClosedEvent:
            // A stream NIO closed without our seeing its end (e.g. a stream-level protocol error).
            if streams[closed.streamID] != nil {
                finish(closed.streamID, with: .failed(.streamReset(UInt32(closed.reason?.networkCode ?? 0))))
            }
        case let window as NIOHTTP2WindowUpdatedEvent where window.streamID == .rootStream:
            if let size = window.inboundWindowSize, let increment = Self.connectionWindowIncrement(inboundWindow: size) {
                context.writeAndFlush(
                    wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))),
                    promise: nil)
            }
        default:
            break
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// The connection's receive window as granted at the start (RFC 9113 §6.9.2): error answers'
    /// bodies use it up, about 27–60 bytes each, and a server sends no more body bytes on the
    /// connection once it is spent. `NIOHTTP2Handler` grants more only through its stream
    /// multiplexer, which this handler replaces, so the grant is made here, by its rule: when
    /// the window (as NIOHTTP2 reports it, bytes it dropped for closed streams included) is down
    /// to half, it is raised back to the whole. Without it, the 2,428th error answer of 27 bytes
    /// on a connection never arrived, and every error answer after it ended as a timeout.
    static let connectionWindowTarget = 65_535

    /// How much to raise the connection's receive window when it stands at `inboundWindow`; nil
    /// while at least half is left.
    static func connectionWindowIncrement(inboundWindow: Int) -> Int? {
        inboundWindow <= connectionWindowTarget / 2 ? connectionWindowTarget - inboundWindow : nil
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError, streams[streamError.streamID] != nil {
            finish(streamError.streamID, with: .failed(.streamReset(UInt32(HTTP2ErrorCode.protocolError.networkCode))))
            return
        }
        // Anything else on the connection is fatal for it; the pool makes a new one.
        failAll(.failed(.connectionLost(String(describing: error))))
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(.failed(.connectionLost("connection closed")))
        context.fireChannelInactive()
    }

    // MARK: completion

    /// A stream already taken out of `streams`, answered.
    private func complete(_ stream: InFlight) {
        let body = stream.body.map { Array($0.readableBytesView) } ?? []
        let answer = HTTP2Response.answer(status: stream.status ?? 0, headers: stream.headers, body: body)
        finish(stream, with: .answer(answer))
    }

    private func finish(_ streamID: HTTP2StreamID, with result: StreamResult) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        finish(stream, with: result)
    }

    /// A stream already taken out of `streams` ends.
    private func finish(_ stream: InFlight, with result: StreamResult) {
        stream.onResult(result)
        closeIfDrained()
    }

    private func failAll(_ result: StreamResult) {
        closed = true
        pingTask?.cancel()
        pingTask = nil
        deadlineSweep?.cancel()
        deadlineSweep = nil
        let all = streams
        streams = [:]
        for (_, stream) in all {
            stream.onResult(result)
        }
    }

    /// After GOAWAY, the connection closes once its last processed stream has its answer.
    private func closeIfDrained() {
        guard goawayLastStreamID != nil, streams.isEmpty, !closed, let context else { return }
        closed = true
        context.close(promise: nil)
    }
}

