/// The per-connection HTTP/2 handler on an EmbeddedChannel: frames out, frames in, and what
/// every stream's promise ends with (answer, reset, deadline, GOAWAY, connection loss).
import APNSModel
import Foundation
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Synchronization
import Testing

@testable import APNSTransport

extension StreamRequest {
    /// A request whose result completes `promise`, for tests that wait on a future.
    init(request: HTTP2Request, deadline: NIODeadline, promise: EventLoopPromise<StreamResult>) {
        self.init(request: request, deadline: deadline, onResult: { promise.succeed($0) })
    }
}

final class EventLog: Sendable {
    private let events = Mutex<[HTTP2ConnectionEvent]>([])
    func append(_ e: HTTP2ConnectionEvent) { events.withLock { $0.append(e) } }
    var all: [HTTP2ConnectionEvent] { events.withLock { $0 } }
}

/// Counts the flushes that reach the socket side of the pipeline.
final class FlushCounter: ChannelOutboundHandler {
    typealias OutboundIn = Any
    private(set) var count = 0
    func flush(context: ChannelHandlerContext) {
        count += 1
        context.flush()
    }
}

struct HandlerHarness {
    let loop = EmbeddedEventLoop()
    let channel: EmbeddedChannel
    let events = EventLog()

    init(pingInterval: TimeAmount = .seconds(60), firstStreamID: HTTP2StreamID = 1) throws {
        let events = self.events
        channel = EmbeddedChannel(loop: loop)
        let batchFlush = BatchFlushHandler()
        try channel.pipeline.syncOperations.addHandler(batchFlush)
        try channel.pipeline.syncOperations.addHandler(
            HTTP2ConnectionHandler(pingInterval: pingInterval, firstStreamID: firstStreamID, batchFlush: batchFlush) { events.append($0) })
        channel.connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: 443), promise: nil)
    }

    static let notification = PushNotification(
        id: UUID(), token: DeviceToken(hex: "00112233445566778899aabbccddeeff")!, topic: "com.example.app",
        pushType: .alert, priority: 10, expiration: nil, collapseID: nil, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8),
        environment: .production)

    /// Sends a request; returns its promise's future.
    func send(deadline: NIODeadline = .distantFuture) throws -> EventLoopFuture<StreamResult> {
        let promise = loop.makePromise(of: StreamResult.self)
        let request = HTTP2Request(notification: Self.notification, authority: "api.push.apple.com", authorization: nil)
        try channel.writeOutbound(StreamRequest(request: request, deadline: deadline, promise: promise))
        return promise.futureResult
    }

    func outbound() throws -> HTTP2Frame? { try channel.readOutbound(as: HTTP2Frame.self) }

    func answer(_ stream: Int, status: Int, body: String? = nil) throws {
        let id = HTTP2StreamID(stream)
        var headers = HPACKHeaders([(":status", String(status)), ("apns-id", "e621e1f8-c36c-495a-93fc-0c247a3e6e5f")])
        if body != nil { headers.add(name: "content-type", value: "application/json") }
        try channel.writeInbound(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: body == nil))))
        if let body {
            try channel.writeInbound(
                HTTP2Frame(
                    streamID: id,
                    payload: .data(.init(data: .byteBuffer(ByteBuffer(string: body)), endStream: true))))
        }
    }

    /// The future's value, which must already be there.
    func value(_ future: EventLoopFuture<StreamResult>) throws -> StreamResult? {
        var result: StreamResult?
        future.assumeIsolated().whenSuccess { result = $0 }
        loop.run()
        return result
    }
}

@Suite struct HTTP2ConnectionHandlerTests {
    @Test func writesHeadersAndDataOnOddStreams() throws {
        let h = try HandlerHarness()
        _ = try h.send()
        _ = try h.send()
        let headers = try #require(try h.outbound())
        #expect(headers.streamID == 1)
        guard case .headers(let hs) = headers.payload else { Issue.record("not HEADERS"); return }
        #expect(!hs.endStream)
        #expect(hs.headers.first(name: ":path") == "/3/device/00112233445566778899aabbccddeeff")
        #expect(hs.headers.first(name: "apns-push-type") == "alert")
        let data = try #require(try h.outbound())
        guard case .data(let d) = data.payload, case .byteBuffer(let bytes) = d.data else {
            Issue.record("not DATA")
            return
        }
        #expect(d.endStream && String(buffer: bytes) == #"{"aps":{"alert":"hi"}}"#)
        #expect(try h.outbound()?.streamID == 3)
    }

    /// The bodies of a batch share one buffer (`HTTP2ConnectionHandler.send`): each DATA frame
    /// must still carry its own request's body, whatever the lengths.
    @Test func eachRequestOfABatchCarriesItsOwnBody() throws {
        let h = try HandlerHarness()
        let handler = try h.channel.pipeline.syncOperations.handler(type: HTTP2ConnectionHandler.self)
        let bodies = [#"{"aps":{}}"#, #"{"aps":{"alert":"the second, longer"}}"#, #"{"aps":{"badge":3}}"#]
        handler.send(
            bodies.map { body in
                var notification = HandlerHarness.notification
                notification.payload = Array(body.utf8)
                let request = HTTP2Request(notification: notification, authority: "api.push.apple.com", authorization: nil)
                return StreamRequest(request: request, deadline: .distantFuture, onResult: { _ in })
            })
        var sent: [(stream: HTTP2StreamID, body: String)] = []
        while let frame = try h.outbound() {
            if case .data(let data) = frame.payload, case .byteBuffer(let bytes) = data.data {
                sent.append((frame.streamID, String(buffer: bytes)))
            }
        }
        #expect(sent.map(\.body) == bodies)
        #expect(sent.map(\.stream) == [1, 3, 5])
    }

    @Test func perNotificationHeadersStayOutOfTheHPACKTable() throws {
        let h = try HandlerHarness()
        _ = try h.send()
        let frame = try #require(try h.outbound())
        guard case .headers(let hs) = frame.payload else { Issue.record("not HEADERS"); return }
        var indexing: [String: HPACKIndexing] = [:]
        for (name, _, index) in hs.headers { indexing[name] = index }
        #expect(indexing["apns-id"] == .nonIndexable)
        #expect(indexing[":path"] == .nonIndexable)
        #expect(indexing["content-length"] == .nonIndexable)
        #expect(indexing["apns-topic"] == .indexable)
        #expect(indexing["apns-push-type"] == .indexable)
    }

    @Test func aBatchOpensAStreamPerRequestAndFlushesOnce() throws {
        let h = try HandlerHarness()
        let flushes = FlushCounter()
        try h.channel.pipeline.syncOperations.addHandler(flushes, position: .first)
        let handler = try h.channel.pipeline.syncOperations.handler(type: HTTP2ConnectionHandler.self)
        let promises = (0..<3).map { _ in h.loop.makePromise(of: StreamResult.self) }
        let request = HTTP2Request(notification: HandlerHarness.notification, authority: "api.push.apple.com", authorization: nil)
        handler.send(promises.map { StreamRequest(request: request, deadline: .distantFuture, promise: $0) })
        var streams: [HTTP2StreamID] = []
        while let frame = try h.outbound() {
            if case .headers = frame.payload { streams.append(frame.streamID) }
        }
        #expect(streams == [1, 3, 5])
        #expect(flushes.count == 1)
        try h.answer(3, status: 200)
        #expect(try h.value(promises[1].futureResult) == .answer(HTTPAnswer(status: 200, apnsID: UUID(uuidString: "e621e1f8-c36c-495a-93fc-0c247a3e6e5f"))))
    }

    @Test func aBatchForAClosedConnectionIsNotProcessed() throws {
        let h = try HandlerHarness()
        let handler = try h.channel.pipeline.syncOperations.handler(type: HTTP2ConnectionHandler.self)
        try h.channel.close().wait()
        let promise = h.loop.makePromise(of: StreamResult.self)
        let request = HTTP2Request(notification: HandlerHarness.notification, authority: "api.push.apple.com", authorization: nil)
        handler.send([StreamRequest(request: request, deadline: .distantFuture, promise: promise)])
        #expect(try h.value(promise.futureResult) == .notProcessed)
    }

    @Test func successAnswer() throws {
        let h = try HandlerHarness()
        let future = try h.send()
        try h.answer(1, status: 200)
        let result = try h.value(future)
        #expect(result == .answer(HTTPAnswer(status: 200, apnsID: UUID(uuidString: "e621e1f8-c36c-495a-93fc-0c247a3e6e5f"))))
    }

    @Test func errorAnswerWithBody() throws {
        let h = try HandlerHarness()
        let future = try h.send()
        try h.answer(1, status: 410, body: #"{"reason":"Unregistered","timestamp":1700000000000}"#)
        guard case .answer(let answer) = try h.value(future) else { Issue.record("no answer"); return }
        #expect(answer.status == 410 && answer.reason == .unregistered && answer.timestamp == 1_700_000_000_000)
    }

    @Test func resetStream() throws {
        let h = try HandlerHarness()
        let future = try h.send()
        try h.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .rstStream(.internalError)))
        #expect(try h.value(future) == .failed(.streamReset(2)))
    }

    @Test func refusedStreamWasNotProcessed() throws {
        let h = try HandlerHarness()
        let future = try h.send()
        try h.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .rstStream(.refusedStream)))
        #expect(try h.value(future) == .notProcessed)
    }

    @Test func deadlineResetsTheStreamAndTimesOut() throws {
        let h = try HandlerHarness()
        let future = try h.send(deadline: h.loop.now + .seconds(10))
        while try h.outbound() != nil {}
        h.loop.advanceTime(by: .seconds(9))
        #expect(try h.value(future) == nil)
        h.loop.advanceTime(by: .seconds(1))
        #expect(try h.value(future) == .failed(.timeout))
        let reset = try #require(try h.outbound())
        #expect(reset.streamID == 1)
        guard case .rstStream(.cancel) = reset.payload else { Issue.record("expected RST_STREAM CANCEL"); return }
        // A late answer for the stream is ignored.
        try h.answer(1, status: 200)
    }

    @Test func goawayHandsBackUnprocessedStreamsAndDrains() throws {
        let h = try HandlerHarness()
        let first = try h.send(), second = try h.send(), third = try h.send()
        try h.channel.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: 1, errorCode: .noError, opaqueData: nil)))
        #expect(try h.value(second) == .notProcessed)
        #expect(try h.value(third) == .notProcessed)
        #expect(h.events.all == [.goaway(lastStreamID: 1, errorCode: 0)])
        // No new streams after GOAWAY.
        #expect(try h.value(try h.send()) == .notProcessed)
        // The processed stream still gets its answer; then the connection closes.
        #expect(h.channel.isActive)
        try h.answer(1, status: 200)
        guard case .answer(let a) = try h.value(first) else { Issue.record("no answer for stream 1"); return }
        #expect(a.status == 200)
        #expect(!h.channel.isActive)
    }

    @Test func retiresBeforeStreamIDsRunOutWithNothingLost() throws {
        // Two stream ids left before the retirement mark, the last one near the 31-bit limit.
        let last = HTTP2ConnectionHandler.lastStreamIDToUse
        let h = try HandlerHarness(firstStreamID: HTTP2StreamID(Int32(last) - 2))
        let first = try h.send(), second = try h.send(), third = try h.send()
        var opened: [HTTP2StreamID] = []
        while let frame = try h.outbound() {
            if case .headers = frame.payload { opened.append(frame.streamID) }
        }
        #expect(opened == [HTTP2StreamID(Int32(last) - 2), last])
        // The request that found no stream id left goes back to the pool for another connection.
        #expect(try h.value(third) == .notProcessed)
        #expect(h.events.all == [.retiring(lastStreamID: Int(last))])
        #expect(try h.value(try h.send()) == .notProcessed)
        // The open streams still get their answers; then the connection closes.
        try h.answer(Int(last) - 2, status: 200)
        #expect(h.channel.isActive)
        try h.answer(Int(last), status: 200)
        guard case .answer(let a) = try h.value(first), case .answer(let b) = try h.value(second) else {
            Issue.record("the open streams were not answered")
            return
        }
        #expect(a.status == 200 && b.status == 200)
        #expect(!h.channel.isActive)
    }

    @Test func connectionLossFailsEveryStream() throws {
        let h = try HandlerHarness()
        let a = try h.send(), b = try h.send()
        h.channel.pipeline.fireChannelInactive()
        #expect(try h.value(a) == .failed(.connectionLost("connection closed")))
        #expect(try h.value(b) == .failed(.connectionLost("connection closed")))
    }

    @Test func reportsSettings() throws {
        let h = try HandlerHarness()
        try h.channel.writeInbound(
            HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: 1000)]))))
        try h.channel.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([]))))
        #expect(h.events.all == [.settings(maxConcurrentStreams: 1000), .settings(maxConcurrentStreams: nil)])
    }

    @Test func pingsWhenIdleAndClosesWhenUnanswered() throws {
        let h = try HandlerHarness(pingInterval: .seconds(60))
        h.loop.advanceTime(by: .seconds(60))
        let ping = try #require(try h.outbound())
        guard case .ping(_, ack: false) = ping.payload else { Issue.record("expected PING"); return }
        try h.channel.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 0), ack: true)))
        h.loop.advanceTime(by: .seconds(60))
        #expect(try h.outbound() != nil)  // the next idle PING
        #expect(h.channel.isActive)
        h.loop.advanceTime(by: .seconds(60))  // never answered
        #expect(!h.channel.isActive)
    }
}
