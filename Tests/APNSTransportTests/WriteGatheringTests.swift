/// The writes that reach TLS: a batch of requests through the connection's own handlers
/// (`HTTP2Transport.addHTTP2Handlers`) arrives as a few buffers of at most a TLS record, not three
/// per request; and `WriteGatheringHandler` alone keeps bytes, order and promises.
import APNSModel
import NIOCore
import NIOEmbedded
import NIOHTTP2
import Synchronization
import Testing

@testable import APNSTransport

@Suite struct WriteGatheringTests {
    /// The buffers written to the socket side, one per write.
    static func writes(in channel: EmbeddedChannel) throws -> [ByteBuffer] {
        var writes: [ByteBuffer] = []
        while let data = try channel.readOutbound(as: IOData.self) {
            guard case .byteBuffer(let buffer) = data else {
                Issue.record("a file region")
                continue
            }
            writes.append(buffer)
        }
        return writes
    }

    static func connection(flushes: FlushCounter) throws -> (EmbeddedChannel, HTTP2ConnectionHandler) {
        let channel = EmbeddedChannel(loop: EmbeddedEventLoop())
        try channel.pipeline.syncOperations.addHandler(flushes)
        try HTTP2Transport.addHTTP2Handlers(to: channel.pipeline.syncOperations, pingInterval: .seconds(60)) { _ in }
        let handler = try channel.pipeline.syncOperations.handler(type: HTTP2ConnectionHandler.self)
        channel.connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: 443), promise: nil)
        _ = try writes(in: channel)  // the preface and SETTINGS
        return (channel, handler)
    }

    /// A request of about 600 bytes on the wire (a 500-byte payload).
    static let request: HTTP2Request = {
        var notification = HandlerHarness.notification
        notification.payload = Array(#"{"aps":{"alert":"\#(String(repeating: "x", count: 480))"}}"#.utf8)
        return HTTP2Request(notification: notification, authority: "api.push.apple.com", authorization: nil)
    }()

    // 90: under NIOHTTP2's 100 streams before the server's SETTINGS; about 54 KB, four records.
    @Test(arguments: [10, 90])
    func aBatchReachesTLSInRecordSizedBuffers(requests: Int) throws {
        let flushes = FlushCounter()
        let (channel, handler) = try Self.connection(flushes: flushes)
        let before = flushes.count
        handler.send((0..<requests).map { _ in StreamRequest(request: Self.request, deadline: .distantFuture, onResult: { _ in }) })

        let writes = try Self.writes(in: channel)
        // Three writes a request (HEADERS, the DATA frame's header, its payload) reached TLS
        // before, each sealed as a record of its own; now every buffer but the last is full to
        // within one frame.
        #expect(writes.count < requests)
        #expect(writes.allSatisfy { $0.readableBytes <= WriteGatheringHandler.recordSize })
        #expect(writes.dropLast().allSatisfy { $0.readableBytes > WriteGatheringHandler.recordSize - 600 })
        #expect(flushes.count == before + 1)
        // The bytes are whole frames in stream order, each body right after its headers.
        var bytes = ByteBuffer()
        for var write in writes { bytes.writeBuffer(&write) }
        let channelOfBytes = EmbeddedChannel()
        _ = try channelOfBytes.writeOutbound(IOData.byteBuffer(bytes))
        let frames = try BatchFlushTests.frames(in: channelOfBytes)
        var streams: [UInt32] = []
        var types: [UInt8] = []
        for index in 0..<requests {
            let stream = UInt32(1 + 2 * index)
            streams += [stream, stream]
            types += [1, 0]  // HEADERS, DATA
        }
        #expect(frames.map(\.stream) == streams)
        #expect(frames.map(\.type) == types)
    }

    static func bytes(_ count: Int, _ value: UInt8) -> ByteBuffer {
        ByteBuffer(repeating: value, count: count)
    }

    @Test func writesUpToAFlushLeaveAsOneBufferInOrderAndTheirPromisesComplete() throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(WriteGatheringHandler())
        let first = channel.eventLoop.makePromise(of: Void.self)
        let second = channel.eventLoop.makePromise(of: Void.self)
        let completed = Mutex(0)
        first.futureResult.whenSuccess { completed.withLock { $0 += 1 } }
        second.futureResult.whenSuccess { completed.withLock { $0 += 1 } }
        channel.write(IOData.byteBuffer(Self.bytes(3, 1)), promise: first)
        channel.write(IOData.byteBuffer(Self.bytes(2, 2)), promise: nil)
        channel.write(IOData.byteBuffer(Self.bytes(4, 3)), promise: second)
        #expect(try channel.readOutbound(as: IOData.self) == nil, "nothing before the flush")
        channel.flush()
        #expect(try Self.writes(in: channel) == [ByteBuffer(bytes: [1, 1, 1, 2, 2, 3, 3, 3, 3])])
        #expect(completed.withLock { $0 } == 2)

        // The next batch starts empty.
        channel.writeAndFlush(IOData.byteBuffer(Self.bytes(1, 9)), promise: nil)
        #expect(try Self.writes(in: channel) == [Self.bytes(1, 9)])
    }

    @Test func noBufferPassesARecordAndALargeWriteGoesDownAsItIs() throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(WriteGatheringHandler())
        let record = WriteGatheringHandler.recordSize
        channel.write(IOData.byteBuffer(Self.bytes(record - 10, 1)), promise: nil)
        channel.write(IOData.byteBuffer(Self.bytes(20, 2)), promise: nil)  // would pass the record size
        channel.write(IOData.byteBuffer(Self.bytes(record, 3)), promise: nil)  // a record of its own
        channel.write(IOData.byteBuffer(Self.bytes(5, 4)), promise: nil)
        channel.flush()
        #expect(
            try Self.writes(in: channel) == [
                Self.bytes(record - 10, 1), Self.bytes(20, 2), Self.bytes(record, 3), Self.bytes(5, 4),
            ])
    }

    @Test func gatheredWritesGoDownBeforeAClose() throws {
        let channel = EmbeddedChannel()
        let below = WriteRecorder()
        try channel.pipeline.syncOperations.addHandler(below)
        try channel.pipeline.syncOperations.addHandler(WriteGatheringHandler())
        channel.write(IOData.byteBuffer(Self.bytes(3, 7)), promise: nil)
        #expect(below.writes.isEmpty, "gathered")
        // Unflushed, they go down to TLS before the close, as they did without the handler.
        channel.close(promise: nil)
        #expect(below.writes == [.byteBuffer(Self.bytes(3, 7))])
    }
}

/// Records the writes that pass it.
final class WriteRecorder: ChannelOutboundHandler {
    typealias OutboundIn = IOData
    private(set) var writes: [IOData] = []
    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        writes.append(unwrapOutboundIn(data))
        context.write(data, promise: promise)
    }
}
