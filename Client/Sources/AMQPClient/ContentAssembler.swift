/// A message reaches a channel in pieces: a `basic.deliver` or `basic.return` method, a header
/// frame (properties and body size), then body frames until the body is complete. This puts the
/// pieces together per channel, as a value with no IO; the driver decodes the frames, hands them
/// over, and gets each finished message back.
///
/// The body size comes from the wire, so it is never trusted with memory: a message is begun
/// with the receiver's body limit, and a body the header announces as larger is read and
/// dropped frame by frame (no byte kept, no capacity reserved), then handed over empty and
/// marked with the size the header claimed (`oversizedBodySize`). Memory per channel therefore
/// stays within the limit whatever the broker's `max_message_size`. A message begun with
/// `keepsPrefix` (the operator listings) keeps the first `bodyLimit` bytes of such a body
/// instead of none: a listing shows the start of a large body and never holds the rest.
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
        /// The body size the header frame announced.
        var bodySize: UInt64 = 0
        var body: [UInt8] = []
        /// The body was larger than the limit the message was begun with: `body` stays empty.
        var oversized = false
        /// The encoded size of properties over `AMQPProperties.maximumEncodedSize` (their headers
        /// were left out), or nil.
        var oversizedPropertiesSize: Int?
        /// The header table nested deeper than `AMQPProperties.maximumHeaderDepth` (it was left out).
        var headersNestedTooDeep = false
        /// The oversized body was copied to where its consumer said, and the broker confirmed it.
        var oversizedCopied = false
        /// The largest body kept (from `begin`).
        fileprivate var bodyLimit: Int = 0
        /// An oversized body keeps its first `bodyLimit` bytes (from `begin`).
        fileprivate var keepsPrefix = false
        /// Body bytes seen so far, kept or not.
        fileprivate var received: UInt64 = 0
    }

    /// Capacity reserved up front for a body within its limit: a limit of "anything" must not
    /// become a reservation the size of whatever a header claims; past this the array grows
    /// as the bytes actually arrive.
    static let maximumReservation = 1 << 20

    private var pending: [UInt16: Message] = [:]

    /// Whether a message is being put together on `channel` (else its header and body frames
    /// belong to nothing we asked for and are ignored).
    func isAssembling(on channel: UInt16) -> Bool { pending[channel] != nil }

    /// The method that starts a message; its body is kept only up to `bodyLimit` bytes: a
    /// larger one not at all, or its first `bodyLimit` bytes with `keepsPrefix`.
    mutating func begin(
        _ kind: Message.Kind, exchange: String, routingKey: String, bodyLimit: Int = .max, keepsPrefix: Bool = false, on channel: UInt16
    ) {
        pending[channel] = Message(
            kind: kind, exchange: exchange, routingKey: routingKey, bodyLimit: max(bodyLimit, 0), keepsPrefix: keepsPrefix)
    }

    /// How many body bytes `message` keeps: all of them within the limit, else its prefix or none.
    private static func kept(_ message: Message) -> Int {
        guard message.oversized else { return Int(message.bodySize) }  // within the limit, so within Int
        return message.keepsPrefix ? message.bodyLimit : 0
    }

    /// The header frame: the finished message when it has no body, else nil (body frames follow).
    /// `properties` decodes the frame's properties, only when a message is being assembled.
    /// `oversizedPropertiesSize`: the encoded size of properties over the contract's bound (the
    /// message is malformed; `properties` leaves their headers out).
    mutating func header(
        on channel: UInt16, bodySize: UInt64, oversizedPropertiesSize: Int? = nil, headersNestedTooDeep: Bool = false,
        properties: () -> AMQPProperties?
    ) -> Message? {
        // Taken out and put back rather than copied: a copy retains every field of the message.
        guard var message = pending.removeValue(forKey: channel) else { return nil }
        if let properties = properties() { message.properties = properties }
        message.oversizedPropertiesSize = oversizedPropertiesSize
        message.headersNestedTooDeep = headersNestedTooDeep
        message.bodySize = bodySize
        message.oversized = bodySize > UInt64(message.bodyLimit)
        // A second header (a broker's bug, found by FuzzContentAssembler: it trapped the owner
        // thread) must leave no more bytes kept than it announces, none when over the limit.
        let kept = Self.kept(message)
        if message.body.count > kept { message.body.removeSubrange(kept...) }
        // Nothing kept: let go of what an earlier header reserved too (FuzzContentAssembler).
        if kept == 0 && message.body.capacity > 0 { message.body = [] }
        message.body.reserveCapacity(min(kept, Self.maximumReservation))
        if bodySize == 0 { return message }
        pending[channel] = message
        return nil
    }

    /// The message on `channel` whose header announced a body over its limit, while its body
    /// frames are still to come (for the driver to copy them on as they arrive), else nil.
    func oversizedPending(on channel: UInt16) -> Message? {
        guard let message = pending[channel], message.oversized else { return nil }
        return message
    }

    /// A body frame: the finished message once the body is complete, else nil.
    mutating func body(on channel: UInt16, _ fragment: [UInt8]) -> Message? {
        fragment.withUnsafeBytes { body(on: channel, $0) }
    }

    /// A body frame read in place (librabbitmq's frame buffer): its bytes are copied once, into
    /// the message's body, not first into an array of their own.
    mutating func body(on channel: UInt16, _ fragment: UnsafeRawBufferPointer) -> Message? {
        // Taken out while appending, so the body is not copied on write.
        guard var message = pending.removeValue(forKey: channel) else { return nil }
        message.received += UInt64(fragment.count)
        // Bytes beyond the announced size (a broker's bug) are not kept: the limit was checked
        // against that size. Past the limit, only a prefix the message keeps is appended.
        let room = Self.kept(message) - message.body.count
        if room > 0 {
            message.body.append(contentsOf: UnsafeRawBufferPointer(rebasing: fragment.prefix(room)))
        }
        if message.received >= message.bodySize { return message }
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
