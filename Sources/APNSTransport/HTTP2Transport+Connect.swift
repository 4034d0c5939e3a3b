/// How `HTTP2Transport` connects one slot: TCP, TLS and the HTTP/2 handlers, each connection's
/// events passed to the pool's machine with the slot and generation they belong to.
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL

extension HTTP2Transport {
    func connect(slot: Int, generation: Int) async throws -> HTTP2Connection {
        let tlsContext = self.tlsContext
        let host = configuration.host
        let pingInterval = configuration.pingInterval.timeAmount
        let bootstrap = ClientBootstrap(group: eventLoop(forSlot: slot))
            .connectTimeout(configuration.connectTimeout.timeAmount)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(ClientTLS.handler(context: tlsContext, host: host))
                    try Self.addHTTP2Handlers(to: sync, pingInterval: pingInterval) { [self] event in
                        connectionEvent(event, slot: slot, generation: generation)
                    }
                }
            }
        // connect(host:port:) resolves the name afresh for every connection.
        let channel = try await bootstrap.connect(host: host, port: configuration.port).get()
        return try await channel.eventLoop.submit {
            HTTP2Connection(channel: channel, handler: try channel.pipeline.syncOperations.handler(type: HTTP2ConnectionHandler.self))
        }.get()
    }

    /// The loop slot `slot` connects on: the group's loops in turn, by slot.
    func eventLoop(forSlot slot: Int) -> any EventLoop {
        eventLoops.isEmpty ? eventLoopGroup.next() : eventLoops[slot % eventLoops.count]
    }

    /// The handlers of a connection above TLS, bottom to top: writes gathered into TLS records,
    /// flushes kept back for a batch, NIOHTTP2, and the APNs protocol work.
    static func addHTTP2Handlers(
        to sync: ChannelPipeline.SynchronousOperations, pingInterval: TimeAmount,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) throws {
        try sync.addHandler(WriteGatheringHandler())
        let batchFlush = BatchFlushHandler()
        try sync.addHandler(batchFlush)
        try sync.addHandler(
            NIOHTTP2Handler(
                mode: .client,
                initialSettings: [
                    HTTP2Setting(parameter: .enablePush, value: 0),
                    HTTP2Setting(parameter: .maxHeaderListSize, value: 16 * 1024),
                ],
                // The header names we send are constants in the right order
                // (`HTTP2Request`), and of Apple's answers we read only `:status` and
                // `apns-id`, each checked where it is read: checking every block
                // both ways was about 5 % of the worker's CPU on the profile.
                headerBlockValidation: .disabled,
                // Our content-length is the body we write, by construction; an
                // answer is read whole, to END_STREAM, whatever it declares.
                contentLengthValidation: .disabled))
        try sync.addHandler(HTTP2ConnectionHandler(pingInterval: pingInterval, batchFlush: batchFlush, onEvent: onEvent))
    }

}
