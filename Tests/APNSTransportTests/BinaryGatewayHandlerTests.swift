/// The binary transport's read side on an EmbeddedChannel: error responses split across reads
/// or packed together, the TLS handshake event, bytes that are not an error response, the close.
import APNSBinaryProtocol
import NIOCore
import NIOEmbedded
import NIOTLS
import Testing

@testable import APNSTransport

@Suite struct BinaryGatewayHandlerTests {
    /// What the handler reported, in order, as text (its events carry an `any Error`).
    final class Events {
        var all: [String] = []
    }

    static func makeChannel() throws -> (EmbeddedChannel, Events) {
        let events = Events()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(
            BinaryGatewayHandler { event in
                switch event {
                case .ready: events.all.append("ready")
                case .errorResponse(let response): events.all.append("error \(response.status.rawValue) \(response.identifier)")
                case .unexpectedCommand(let command): events.all.append("unexpected \(command)")
                case .failed: events.all.append("failed")
                case .closed: events.all.append("closed")
                }
            })
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 2195)).wait()
        return (channel, events)
    }

    @Test func anErrorResponseSplitAcrossReadsIsReportedOnce() throws {
        let (channel, events) = try Self.makeChannel()
        let bytes = BinaryErrorResponse(status: .invalidToken, identifier: 0x0102_0304).encoded()
        try channel.writeInbound(ByteBuffer(bytes: bytes[0..<2]))
        #expect(events.all.isEmpty)
        try channel.writeInbound(ByteBuffer(bytes: bytes[2...]))
        #expect(events.all == ["error 8 16909060"])
        _ = try? channel.finish()
    }

    @Test func twoResponsesInOneReadAreBothReported() throws {
        let (channel, events) = try Self.makeChannel()
        let bytes = BinaryErrorResponse(status: .shutdown, identifier: 7).encoded()
            + BinaryErrorResponse(status: .processingError, identifier: 9).encoded()
        try channel.writeInbound(ByteBuffer(bytes: bytes))
        #expect(events.all == ["error 10 7", "error 1 9"])
        _ = try? channel.finish()
    }

    @Test func theHandshakeEventMeansReady() throws {
        let (channel, events) = try Self.makeChannel()
        channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        #expect(events.all == ["ready"])
        _ = try? channel.finish()
    }

    @Test func bytesThatAreNotAnErrorResponseCloseTheConnection() throws {
        let (channel, events) = try Self.makeChannel()
        try channel.writeInbound(ByteBuffer(bytes: [0x48, 0x54, 0x54, 0x50]))
        #expect(events.all == ["unexpected 72", "closed"])
        #expect(!channel.isActive)
    }
}
