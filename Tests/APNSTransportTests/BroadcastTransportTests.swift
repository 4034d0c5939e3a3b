/// A broadcast (contract §7) through the per-connection HTTP/2 handler on an EmbeddedChannel: the
/// frames are Apple's broadcast request ("Sending broadcast push notification requests to APNs")
/// on the same connection as device notifications, and Apple's answer comes back whole.
import APNSModel
import APNSOutcome
import Foundation
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Testing

@testable import APNSTransport

@Suite struct BroadcastTransportTests {
    static let channelID = "dHN0LXNyY2gtY2hubA=="
    static let requestID = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!

    static let broadcast = PushNotification(
        id: requestID, target: .channel(BroadcastChannel(id: channelID)!), topic: "com.example.app",
        pushType: .liveactivity, priority: 10, expiration: 0, collapseID: nil,
        payload: Array(#"{"aps":{"event":"update","content-state":{"score":"1-0"}}}"#.utf8), environment: .production)

    func send(_ notification: PushNotification, on h: HandlerHarness) throws -> EventLoopFuture<StreamResult> {
        let promise = h.loop.makePromise(of: StreamResult.self)
        let request = HTTP2Request(notification: notification, authority: "api.push.apple.com", authorization: "bearer a.b.c")
        try h.channel.writeOutbound(StreamRequest(request: request, deadline: .distantFuture, promise: promise))
        return promise.futureResult
    }

    @Test func aBroadcastIsApplesBroadcastRequestWithNoDeviceToken() throws {
        let h = try HandlerHarness()
        _ = try send(Self.broadcast, on: h)
        let frame = try #require(try h.outbound())
        guard case .headers(let hs) = frame.payload else {
            Issue.record("not HEADERS")
            return
        }
        let headers = hs.headers
        #expect(headers.first(name: ":method") == "POST")
        #expect(headers.first(name: ":path") == "/4/broadcasts/apps/com.example.app")
        #expect(headers.first(name: ":authority") == "api.push.apple.com")
        #expect(headers.first(name: "apns-channel-id") == Self.channelID)
        #expect(headers.first(name: "apns-request-id") == "e621e1f8-c36c-495a-93fc-0c247a3e6e5f")
        #expect(headers.first(name: "apns-push-type") == "liveactivity")
        #expect(headers.first(name: "apns-priority") == "10")
        #expect(headers.first(name: "apns-expiration") == "0")
        #expect(headers.first(name: "authorization") == "bearer a.b.c")
        #expect(headers.first(name: "apns-topic") == nil)
        #expect(headers.first(name: "apns-id") == nil)
        #expect(!headers.contains { $0.value.contains("/3/device") })
        // The request id changes every time: kept out of the HPACK table, like apns-id.
        var indexing: [String: HPACKIndexing] = [:]
        for (name, _, index) in headers { indexing[name] = index }
        #expect(indexing["apns-request-id"] == .nonIndexable)
        let data = try #require(try h.outbound())
        guard case .data(let d) = data.payload, case .byteBuffer(let bytes) = d.data else {
            Issue.record("not DATA")
            return
        }
        #expect(d.endStream)
        #expect(Array(buffer: bytes) == Self.broadcast.payload)
    }

    @Test func aBroadcastSharesTheConnectionWithDeviceNotifications() throws {
        let h = try HandlerHarness()
        let device = try h.send()
        let broadcast = try send(Self.broadcast, on: h)
        var paths: [HTTP2StreamID: String] = [:]
        while let frame = try h.outbound() {
            if case .headers(let hs) = frame.payload { paths[frame.streamID] = hs.headers.first(name: ":path") }
        }
        #expect(paths[1] == "/3/device/00112233445566778899aabbccddeeff")
        #expect(paths[3] == "/4/broadcasts/apps/com.example.app")
        try h.answer(1, status: 200)
        try answer(3, status: 200, on: h)
        if case .answer(let a) = try h.value(device) { #expect(a.status == 200) } else { Issue.record("device not answered") }
        guard case .answer(let b) = try h.value(broadcast) else {
            Issue.record("broadcast not answered")
            return
        }
        #expect(b.status == 200)
        #expect(b.apnsID == Self.requestID)
        #expect(OutcomeClassifier.classify(b) == .delivered)
    }

    @Test func applesChannelReasonComesBackForTheRouter() throws {
        let h = try HandlerHarness()
        let future = try send(Self.broadcast, on: h)
        try answer(1, status: 404, body: #"{"reason":"ChannelNotRegistered"}"#, on: h)
        guard case .answer(let a) = try h.value(future) else {
            Issue.record("not answered")
            return
        }
        #expect(a.status == 404)
        #expect(a.reason == .channelNotRegistered)
        #expect(OutcomeClassifier.classify(a) == .invalidToken(reason: "ChannelNotRegistered", timestamp: nil))
    }

    /// Apple's answer to a broadcast names it with `apns-request-id`.
    func answer(_ stream: Int, status: Int, body: String? = nil, on h: HandlerHarness) throws {
        let id = HTTP2StreamID(stream)
        var headers = HPACKHeaders([(":status", String(status)), ("apns-request-id", Self.requestID.uuidString.lowercased())])
        if body != nil { headers.add(name: "content-type", value: "application/json") }
        try h.channel.writeInbound(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: body == nil))))
        if let body {
            try h.channel.writeInbound(
                HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(ByteBuffer(string: body)), endStream: true))))
        }
    }
}
