/// `ContentAssembler` (internal to the client) for the fuzz target in Fuzz/
/// (`FuzzContentAssembler`): the same calls, each finished message reduced to what the target
/// checks against its own model of the frame sequence. The connection does not go through here.
public struct AMQPContentAssemblerProbe {
    public struct Finished: Equatable, Sendable {
        public var tag: UInt64
        public var body: [UInt8]
        public var bodySize: UInt64
        public var oversized: Bool
        /// The capacity of the body's storage: never more than the limit allows.
        public var bodyCapacity: Int
    }

    /// What the assembler reserves at most for a body within its limit before bytes arrive.
    public static let maximumReservation = ContentAssembler.maximumReservation

    private var assembler = ContentAssembler()

    public init() {}

    public func isAssembling(on channel: UInt16) -> Bool { assembler.isAssembling(on: channel) }

    public mutating func begin(tag: UInt64, bodyLimit: Int, on channel: UInt16) {
        assembler.begin(.delivery(tag: tag, redelivered: false, consumerTag: "fuzz"), exchange: "", routingKey: "", bodyLimit: bodyLimit, on: channel)
    }

    public mutating func header(on channel: UInt16, bodySize: UInt64) -> Finished? {
        assembler.header(on: channel, bodySize: bodySize) { nil }.map(Self.finished)
    }

    public mutating func body(on channel: UInt16, _ fragment: [UInt8]) -> Finished? {
        assembler.body(on: channel, fragment).map(Self.finished)
    }

    public mutating func discard(channel: UInt16) { assembler.discard(channel: channel) }

    private static func finished(_ message: ContentAssembler.Message) -> Finished {
        guard case .delivery(let tag, _, _) = message.kind else { preconditionFailure("only deliveries are begun here") }
        return Finished(
            tag: tag, body: message.body, bodySize: message.bodySize, oversized: message.oversized, bodyCapacity: message.body.capacity)
    }
}
