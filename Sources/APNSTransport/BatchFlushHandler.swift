/// Keeps back flushes between `NIOHTTP2Handler` and TLS while the connection writes a batch of
/// requests, and lets one through at the end.
import NIOCore

/// `HTTP2ConnectionHandler` flushes after each request of a batch. NIOHTTP2 keeps DATA frames in
/// its flow-control buffer and emits them in hash order at a flush. A single flush per batch
/// therefore sent the request bodies out of order. The server then answered out of order, and
/// NIOHTTP2 removed each closed stream from the middle of its sorted stream buffers, a linear
/// shift that was 10 % of the worker's profile. A flush per request keeps the bodies in stream
/// order. This handler keeps those flushes from reaching TLS, so the batch still goes out with
/// one flush and one `write(2)` (and, gathered below it by `WriteGatheringHandler`, a TLS record
/// per 16 KiB). NIO has no such handler.
final class BatchFlushHandler: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private var context: ChannelHandlerContext?
    private var batching = false
    private var flushPending = false

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func flush(context: ChannelHandlerContext) {
        if batching {
            flushPending = true
        } else {
            context.flush()
        }
    }

    /// Runs `body` with flushes kept back, then lets one through if any was asked for.
    func batchingFlushes(_ body: () -> Void) {
        batching = true
        body()
        batching = false
        if flushPending {
            flushPending = false
            context?.flush()
        }
    }
}
