/// A batch of requests through the real NIOHTTP2 client handler on an EmbeddedChannel: the
/// request bodies leave in stream order, and TLS (here the end of the pipeline) sees one flush.
import APNSModel
import NIOCore
import NIOEmbedded
import NIOHTTP2
import Testing

@testable import APNSTransport

@Suite struct BatchFlushTests {
    /// The frames written to the socket side: (type, stream id), after the client preface.
    static func frames(in channel: EmbeddedChannel) throws -> [(type: UInt8, stream: UInt32)] {
        var bytes = ByteBuffer()
        while let data = try channel.readOutbound(as: IOData.self) {
            guard case .byteBuffer(var buffer) = data else { Issue.record("a file region"); continue }
            bytes.writeBuffer(&buffer)
        }
        let preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        if bytes.getString(at: bytes.readerIndex, length: preface.utf8.count) == preface {
            bytes.moveReaderIndex(forwardBy: preface.utf8.count)
        }
        var frames: [(type: UInt8, stream: UInt32)] = []
        while bytes.readableBytes >= 9 {
            let high = Int(bytes.readInteger(as: UInt16.self)!)
            let length = high << 8 | Int(bytes.readInteger(as: UInt8.self)!)
            let type = bytes.readInteger(as: UInt8.self)!
            _ = bytes.readInteger(as: UInt8.self)
            let stream = bytes.readInteger(as: UInt32.self)! & 0x7fff_ffff
            bytes.moveReaderIndex(forwardBy: length)
            frames.append((type, stream))
        }
        #expect(bytes.readableBytes == 0, "whole frames only")
        return frames
    }

    @Test func aBatchLeavesInStreamOrderWithOneFlushToTLS() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let flushes = FlushCounter()
        let batch = BatchFlushHandler()
        let handler = HTTP2ConnectionHandler(pingInterval: .seconds(60), batchFlush: batch) { _ in }
        try channel.pipeline.syncOperations.addHandler(flushes)
        try channel.pipeline.syncOperations.addHandler(batch)
        try channel.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .client))
        try channel.pipeline.syncOperations.addHandler(handler)
        channel.connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: 443), promise: nil)
        _ = try Self.frames(in: channel)  // the preface and SETTINGS
        let before = flushes.count

        let request = HTTP2Request(notification: HandlerHarness.notification, authority: "api.push.apple.com", authorization: nil)
        let promises = (0..<40).map { _ in loop.makePromise(of: StreamResult.self) }
        handler.send(promises.map { StreamRequest(request: request, deadline: .distantFuture, promise: $0) })

        let frames = try Self.frames(in: channel)
        let headers = frames.filter { $0.type == 1 }.map(\.stream)
        let data = frames.filter { $0.type == 0 }.map(\.stream)
        let expected = (0..<40).map { UInt32(1 + 2 * $0) }
        #expect(headers == expected)
        // One flush per request through NIOHTTP2 puts each body right after its headers; one
        // flush for the batch emitted them in hash order.
        #expect(data == expected)
        #expect(flushes.count == before + 1)
        for promise in promises { promise.succeed(.notProcessed) }
    }

    @Test func flushesOutsideABatchPassStraightThrough() throws {
        let channel = EmbeddedChannel()
        let flushes = FlushCounter()
        let batch = BatchFlushHandler()
        try channel.pipeline.syncOperations.addHandler(flushes)
        try channel.pipeline.syncOperations.addHandler(batch)
        channel.flush()
        #expect(flushes.count == 1)
        batch.batchingFlushes {
            channel.flush()
            channel.flush()
            #expect(flushes.count == 1, "kept back")
        }
        #expect(flushes.count == 2, "one for the two kept back")
        batch.batchingFlushes {}
        #expect(flushes.count == 2, "none asked for, none let through")
    }
}
