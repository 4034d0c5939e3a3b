/// A message reaches a channel in pieces: a `basic.deliver` or `basic.return` method, a header
/// frame (properties and body size), then body frames until the body is complete. This puts the
/// pieces together per channel, as a value with no IO; the driver decodes the frames, hands them
/// over, and gets each finished message back.
struct ContentAssembler {
    struct Message {
        enum Kind: Equatable {
            case delivery(tag: UInt64, redelivered: Bool, consumerTag: String)
            case returned(replyCode: UInt16, replyText: String)
        }
        var kind: Kind
        var exchange: String
        var routingKey: String
        var properties = AMQPProperties()
        var bodySize = 0
        var body: [UInt8] = []
    }

    private var pending: [UInt16: Message] = [:]

    /// Whether a message is being put together on `channel` (else its header and body frames
    /// belong to nothing we asked for and are ignored).
    func isAssembling(on channel: UInt16) -> Bool { pending[channel] != nil }

    /// The method that starts a message.
    mutating func begin(_ kind: Message.Kind, exchange: String, routingKey: String, on channel: UInt16) {
        pending[channel] = Message(kind: kind, exchange: exchange, routingKey: routingKey)
    }

    /// The header frame: the finished message when it has no body, else nil (body frames follow).
    /// `properties` decodes the frame's properties, only when a message is being assembled.
    mutating func header(on channel: UInt16, bodySize: Int, properties: () -> AMQPProperties?) -> Message? {
        guard var message = pending[channel] else { return nil }
        if let properties = properties() { message.properties = properties }
        message.bodySize = bodySize
        message.body.reserveCapacity(bodySize)
        if bodySize == 0 {
            pending[channel] = nil
            return message
        }
        pending[channel] = message
        return nil
    }

    /// A body frame: the finished message once the body is complete, else nil.
    mutating func body(on channel: UInt16, _ fragment: [UInt8]) -> Message? {
        // Taken out while appending, so the body is not copied on write.
        guard var message = pending.removeValue(forKey: channel) else { return nil }
        message.body.append(contentsOf: fragment)
        if message.body.count >= message.bodySize { return message }
        pending[channel] = message
        return nil
    }

    /// The channel closed: whatever was half-assembled on it is dropped.
    mutating func discard(channel: UInt16) {
        pending[channel] = nil
    }

    /// The connection died.
    mutating func discardAll() {
        pending.removeAll()
    }
}
