/// The cap on an APNs answer's body: a body up to
/// `HTTP2ConnectionHandler.maximumAnswerBody` is read as before, a larger one resets its stream
/// and ends as a transport fault (retried, `MalformedAnswer`), and the connection goes on. On the
/// per-connection handler with an EmbeddedChannel, and through the whole transport against the
/// simulator's `oversizedBody` script (flow control, frame sizes and TLS in the way).
import APNSModel
import APNSOutcome
import APNSSimulator
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Testing
import TestSupport

@testable import APNSTransport

@Suite struct HTTP2AnswerBodyLimitTests {
    /// `{"reason":"BadDeviceToken","padding":"xx…"}` of exactly `size` bytes.
    static func errorBody(size: Int) -> [UInt8] {
        let head = #"{"reason":"BadDeviceToken","padding":""#, tail = #""}"#
        return Array((head + String(repeating: "x", count: size - head.utf8.count - tail.utf8.count) + tail).utf8)
    }

    /// Headers, then `body` in DATA frames of `frameSize` bytes, the last one ending the stream.
    static func answer(_ h: HandlerHarness, stream: Int, status: Int, body: [UInt8], frameSize: Int) throws {
        let id = HTTP2StreamID(stream)
        let headers = HPACKHeaders([(":status", String(status)), ("apns-id", "e621e1f8-c36c-495a-93fc-0c247a3e6e5f")])
        try h.channel.writeInbound(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: false))))
        var offset = 0
        while offset < body.count {
            let end = min(offset + frameSize, body.count)
            let data = HTTP2Frame.FramePayload.Data(data: .byteBuffer(ByteBuffer(bytes: body[offset..<end])), endStream: end == body.count)
            try h.channel.writeInbound(HTTP2Frame(streamID: id, payload: .data(data)))
            offset = end
        }
    }

    @Test func aBodyAtTheCapIsReadAsBefore() throws {
        let h = try HandlerHarness()
        let future = try h.send()
        try Self.answer(h, stream: 1, status: 400, body: Self.errorBody(size: HTTP2ConnectionHandler.maximumAnswerBody), frameSize: 1000)
        guard case .answer(let answer) = try h.value(future) else { Issue.record("no answer"); return }
        #expect(answer.status == 400 && answer.reason == .badDeviceToken)
    }

    @Test func aBodyOverTheCapResetsItsStreamAndIsATransportFault() throws {
        let h = try HandlerHarness()
        let oversized = try h.send(), next = try h.send()
        while try h.outbound() != nil {}
        // One byte over, in frames: the stream ends at the frame that crosses the cap.
        try Self.answer(h, stream: 1, status: 400, body: Self.errorBody(size: HTTP2ConnectionHandler.maximumAnswerBody + 1), frameSize: 1000)
        guard case .failed(.malformedAnswer(let why)) = try h.value(oversized) else {
            Issue.record("expected a malformed answer, got \(String(describing: try h.value(oversized)))")
            return
        }
        #expect(why.contains("\(HTTP2ConnectionHandler.maximumAnswerBody)"))
        #expect(OutcomeClassifier.classify(.failed(.malformedAnswer(why))) == .retry(reason: "MalformedAnswer", status: 0))
        let reset = try #require(try h.outbound())
        #expect(reset.streamID == 1)
        guard case .rstStream(.cancel) = reset.payload else { Issue.record("expected RST_STREAM CANCEL, got \(reset.payload)"); return }

        // The connection and its other stream go on; a large body in one frame ends the same way.
        #expect(h.channel.isActive)
        try h.answer(3, status: 200)
        guard case .answer(let answer) = try h.value(next) else { Issue.record("no answer for stream 3"); return }
        #expect(answer.status == 200)
        let big = try h.send()
        try Self.answer(h, stream: 5, status: 500, body: Self.errorBody(size: 1 << 20), frameSize: 1 << 20)
        guard case .failed(.malformedAnswer) = try h.value(big) else { Issue.record("expected a malformed answer"); return }
        #expect(h.channel.isActive)
    }

    @Test func throughTheTransportAnOversizedBodyIsAFaultAndTheConnectionGoesOn() async throws {
        try await HTTP2Integration.withTransport { simulator, transport in
            try await waitUntil("a first answer") { await transport.send(HTTP2Integration.notification()).isAccepted }
            let atTheCap = SimulatorTestEnvironment.deviceToken(), over = SimulatorTestEnvironment.deviceToken()
            simulator.script(token: atTheCap, .oversizedBody(status: 400, reason: .badDeviceToken, bodyBytes: HTTP2ConnectionHandler.maximumAnswerBody))
            simulator.script(token: over, .oversizedBody(status: 400, reason: .badDeviceToken, bodyBytes: 1 << 20))
            let read = await transport.send(HTTP2Integration.notification(token: atTheCap))
            #expect(read.answer?.status == 400 && read.answer?.reason == .badDeviceToken, "\(read)")
            let refused = await transport.send(HTTP2Integration.notification(token: over))
            guard case .failed(.malformedAnswer) = refused else {
                Issue.record("expected a malformed answer, got \(refused)")
                return
            }
            #expect(await transport.send(HTTP2Integration.notification()).isAccepted)
            #expect(simulator.counters().connections == 1)
        }
    }

}
