/// Gathers the byte writes between two flushes into one buffer, so TLS seals one record where it
/// sealed one per write.
import NIOCore

/// `NIOSSLHandler` calls `SSL_write` once per buffered write, and BoringSSL seals each call as a
/// TLS record of its own, allocating and freeing its write buffer each time. NIOHTTP2 writes a
/// request as three buffers (the HEADERS frame, the DATA frame's header, its payload), so a
/// request cost three records, three seals and three allocations on the event loop, and the
/// server three records to open; NIOHTTP2 also had to allocate a new frame buffer for every
/// frame, because TLS still held the last one. Copying the few hundred bytes of a request into
/// one buffer is cheaper than any of that. Nothing goes to the socket before a flush either way,
/// so the bytes, their order and when they leave are what they were.
///
/// Sits between TLS and `BatchFlushHandler`. A gathered buffer is written down when it would pass
/// `recordSize` (TLS's largest record), at a flush, and before anything that is not a byte
/// buffer, a close or the handler's removal.
final class WriteGatheringHandler: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    /// TLS's largest record payload (RFC 8446 §5.1): a gathered buffer never grows past it, so
    /// what a connection keeps between batches is bounded.
    static let recordSize = 16 * 1024

    private var gathered = ByteBuffer()
    /// The promises of the gathered writes, as one: completed when the gathered buffer is written.
    private var gatheredPromise: EventLoopPromise<Void>?

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .byteBuffer(var bytes) = unwrapOutboundIn(data), bytes.readableBytes < Self.recordSize else {
            writeGathered(context: context)
            context.write(data, promise: promise)
            return
        }
        if gathered.readableBytes + bytes.readableBytes > Self.recordSize { writeGathered(context: context) }
        gathered.writeBuffer(&bytes)
        if let promise {
            if let gatheredPromise {
                gatheredPromise.futureResult.cascade(to: promise)
            } else {
                gatheredPromise = promise
            }
        }
    }

    func flush(context: ChannelHandlerContext) {
        passDown(context: context)
        context.flush()
        // TLS has sealed the buffer and let it go: clearing it now keeps its storage for the
        // next batch instead of allocating another. (Unless something written during the flush,
        // from a promise's callback, is already gathered again.)
        if gathered.readableBytes == 0 { gathered.clear() }
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        writeGathered(context: context)
        context.close(mode: mode, promise: promise)
    }

    func removeHandler(context: ChannelHandlerContext, removalToken: ChannelHandlerContext.RemovalToken) {
        writeGathered(context: context)
        context.leavePipeline(removalToken: removalToken)
    }

    /// Writes the gathered bytes down, unflushed, and starts a new buffer (TLS holds the old one
    /// until the flush).
    private func writeGathered(context: ChannelHandlerContext) {
        passDown(context: context)
        if gathered.readableBytes == 0 { gathered.clear() }
    }

    /// Writes the gathered bytes down, unflushed. They are marked read before the write, so a
    /// close or a write that the write itself sets off never passes them down twice.
    private func passDown(context: ChannelHandlerContext) {
        guard gathered.readableBytes > 0 else { return }
        let bytes = gathered
        gathered.moveReaderIndex(to: gathered.writerIndex)
        let promise = gatheredPromise
        gatheredPromise = nil
        context.write(wrapOutboundOut(.byteBuffer(bytes)), promise: promise)
    }
}
