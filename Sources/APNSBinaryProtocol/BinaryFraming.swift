/// Apple's legacy binary provider API on the wire: notification frames (command 2) and error
/// responses (command 8), with an encoder and a strict streaming decoder for both. The transport
/// encodes frames and decodes error responses; the simulator does the opposite.
///
/// Frame: command 2 (1 byte), frame length (4 bytes, big-endian), then items, each an item id
/// (1 byte), a data length (2 bytes, big-endian) and the data:
/// 1 device token (32 bytes), 2 payload (at most 2048 bytes), 3 notification identifier
/// (4 bytes), 4 expiration date (4 bytes, UNIX seconds), 5 priority (1 byte).
/// Error response: command 8 (1 byte), status (1 byte), identifier of the frame (4 bytes).
import APNSModel

/// Apple's status codes in an error response. A struct over the byte so a code Apple never
/// documented still has a value.
public struct BinaryStatus: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let noErrors = BinaryStatus(rawValue: 0)
    public static let processingError = BinaryStatus(rawValue: 1)
    public static let missingDeviceToken = BinaryStatus(rawValue: 2)
    public static let missingTopic = BinaryStatus(rawValue: 3)
    public static let missingPayload = BinaryStatus(rawValue: 4)
    public static let invalidTokenSize = BinaryStatus(rawValue: 5)
    public static let invalidTopicSize = BinaryStatus(rawValue: 6)
    public static let invalidPayloadSize = BinaryStatus(rawValue: 7)
    public static let invalidToken = BinaryStatus(rawValue: 8)
    public static let shutdown = BinaryStatus(rawValue: 10)
    public static let protocolError = BinaryStatus(rawValue: 128)
    public static let unknown = BinaryStatus(rawValue: 255)

    /// Every status Apple documents, in Apple's order.
    public static let documented: [BinaryStatus] = [
        .noErrors, .processingError, .missingDeviceToken, .missingTopic, .missingPayload,
        .invalidTokenSize, .invalidTopicSize, .invalidPayloadSize, .invalidToken, .shutdown,
        .protocolError, .unknown,
    ]

    /// A stable name for headers, logs and metrics; `Status<n>` for a code Apple never defined.
    public var name: String {
        switch rawValue {
        case 0: return "NoErrors"
        case 1: return "ProcessingError"
        case 2: return "MissingDeviceToken"
        case 3: return "MissingTopic"
        case 4: return "MissingPayload"
        case 5: return "InvalidTokenSize"
        case 6: return "InvalidTopicSize"
        case 7: return "InvalidPayloadSize"
        case 8: return "InvalidToken"
        case 10: return "Shutdown"
        case 128: return "ProtocolError"
        case 255: return "Unknown"
        default: return "Status\(rawValue)"
        }
    }

    public var description: String { "\(rawValue) (\(name))" }
}

/// Constants of the binary provider API.
public enum BinaryProtocol {
    public static let notificationCommand: UInt8 = 2
    public static let errorResponseCommand: UInt8 = 8
    /// Command byte and 4-byte frame length.
    public static let frameHeaderLength = 5
    public static let errorResponseLength = 6
    public static let deviceTokenLength = 32
    public static let maxPayloadLength = 2048

    /// The item ids of a notification frame.
    public enum Item: UInt8, Sendable, Hashable, CaseIterable {
        case deviceToken = 1
        case payload = 2
        case notificationIdentifier = 3
        case expirationDate = 4
        case priority = 5
    }

    /// The longest frame that can hold each item once: anything longer is a protocol error
    /// before a byte of it is buffered, which bounds what a decoder holds for one peer.
    public static let maxFrameLength = Item.allCases.count * (3 + Int(UInt16.max))
}

/// One notification frame (command 2). Optional items are omitted from the frame when nil.
public struct BinaryNotificationFrame: Sendable, Hashable {
    public var deviceToken: [UInt8]
    public var payload: [UInt8]
    /// Echoed by Apple in an error response; the transport numbers its frames with it.
    public var identifier: UInt32?
    /// UNIX seconds; 0 = deliver once, do not store.
    public var expiration: UInt32?
    /// 10 (immediately) or 5 (power considerations).
    public var priority: UInt8?

    public init(deviceToken: [UInt8], payload: [UInt8], identifier: UInt32?, expiration: UInt32?, priority: UInt8?) {
        self.deviceToken = deviceToken
        self.payload = payload
        self.identifier = identifier
        self.expiration = expiration
        self.priority = priority
    }

    /// The frame for a notification, numbered `identifier` by the transport.
    public init(notification: PushNotification, identifier: UInt32) throws(BinaryFramingError) {
        var expiration: UInt32? = nil
        if let e = notification.expiration {
            guard let fits = UInt32(exactly: e) else { throw .valueOutOfRange(item: .expirationDate, value: e) }
            expiration = fits
        }
        guard let priority = UInt8(exactly: notification.priority) else {
            throw .valueOutOfRange(item: .priority, value: notification.priority)
        }
        guard let token = notification.token else { throw .broadcastUnsupported }
        self.init(
            deviceToken: token.bytes, payload: notification.payload, identifier: identifier,
            expiration: expiration, priority: priority)
    }

    /// Appends the frame to `buffer`. Only the structure is enforced (each item's data fits its
    /// 2-byte length), not Apple's rules on token or payload size: the simulator's tests need to
    /// produce frames Apple would reject.
    public func encode(into buffer: inout [UInt8]) throws(BinaryFramingError) {
        for (item, length) in [(BinaryProtocol.Item.deviceToken, deviceToken.count), (.payload, payload.count)]
        where length > Int(UInt16.max) {
            throw .itemTooLong(item: item, length: length)
        }
        var frameLength = 3 + deviceToken.count + 3 + payload.count
        if identifier != nil { frameLength += 3 + 4 }
        if expiration != nil { frameLength += 3 + 4 }
        if priority != nil { frameLength += 3 + 1 }
        buffer.reserveCapacity(buffer.count + BinaryProtocol.frameHeaderLength + frameLength)
        buffer.append(BinaryProtocol.notificationCommand)
        buffer.appendBigEndian(UInt32(frameLength))
        buffer.appendItem(.deviceToken, deviceToken)
        buffer.appendItem(.payload, payload)
        if let identifier {
            buffer.append(BinaryProtocol.Item.notificationIdentifier.rawValue)
            buffer.appendBigEndian(UInt16(4))
            buffer.appendBigEndian(identifier)
        }
        if let expiration {
            buffer.append(BinaryProtocol.Item.expirationDate.rawValue)
            buffer.appendBigEndian(UInt16(4))
            buffer.appendBigEndian(expiration)
        }
        if let priority {
            buffer.append(BinaryProtocol.Item.priority.rawValue)
            buffer.appendBigEndian(UInt16(1))
            buffer.append(priority)
        }
    }

    public func encoded() throws(BinaryFramingError) -> [UInt8] {
        var out: [UInt8] = []
        try encode(into: &out)
        return out
    }

    /// Decodes the first frame in `bytes` (see `BinaryFrameDecodeResult`).
    public static func decode(_ bytes: [UInt8]) -> BinaryFrameDecodeResult {
        bytes.withUnsafeBytes { decode($0) }
    }

    /// Decodes the first frame in `bytes`, strictly: a complete frame and the bytes it used,
    /// `needMoreData` when `bytes` is a valid but incomplete prefix, or the error Apple would
    /// answer with. Decides as early as it can: a wrong command byte or an impossible frame
    /// length is reported without waiting for the rest.
    public static func decode(_ bytes: UnsafeRawBufferPointer) -> BinaryFrameDecodeResult {
        guard let command = bytes.first else { return .needMoreData }
        guard command == BinaryProtocol.notificationCommand else {
            return .invalid(BinaryFrameDecodingError(
                status: .protocolError, identifier: nil,
                message: "unknown command \(command); only \(BinaryProtocol.notificationCommand) is accepted"))
        }
        guard bytes.count >= BinaryProtocol.frameHeaderLength else { return .needMoreData }
        let frameLength = Int(bytes.readBigEndianUInt32(at: 1))
        guard frameLength <= BinaryProtocol.maxFrameLength else {
            return .invalid(BinaryFrameDecodingError(
                status: .protocolError, identifier: nil,
                message: "frame length \(frameLength) exceeds \(BinaryProtocol.maxFrameLength)"))
        }
        let end = BinaryProtocol.frameHeaderLength + frameLength
        guard bytes.count >= end else { return .needMoreData }

        var items = ItemRanges()
        var identifier: UInt32? = nil
        var offset = BinaryProtocol.frameHeaderLength
        func fail(_ status: BinaryStatus, _ message: String) -> BinaryFrameDecodeResult {
            .invalid(BinaryFrameDecodingError(status: status, identifier: identifier, message: message))
        }
        while offset < end {
            guard end - offset >= 3 else {
                return fail(.protocolError, "truncated item header at frame offset \(offset - BinaryProtocol.frameHeaderLength)")
            }
            let rawID = bytes[offset]
            let length = Int(bytes.readBigEndianUInt16(at: offset + 1))
            let dataStart = offset + 3
            guard length <= end - dataStart else {
                return fail(.protocolError, "item \(rawID) declares \(length) bytes but only \(end - dataStart) remain in the frame")
            }
            guard let item = BinaryProtocol.Item(rawValue: rawID) else {
                return fail(.protocolError, "unknown item id \(rawID)")
            }
            guard items[item] == nil else { return fail(.protocolError, "duplicate item \(rawID)") }
            items[item] = dataStart..<(dataStart + length)
            if item == .notificationIdentifier && length == 4 {
                identifier = bytes.readBigEndianUInt32(at: dataStart)
            }
            offset = dataStart + length
        }

        if let range = items[.notificationIdentifier], range.count != 4 {
            return fail(.protocolError, "notification identifier item is \(range.count) bytes, not 4")
        }
        guard let tokenRange = items[.deviceToken], !tokenRange.isEmpty else {
            return fail(.missingDeviceToken, "no device token item")
        }
        guard tokenRange.count == BinaryProtocol.deviceTokenLength else {
            return fail(.invalidTokenSize, "device token is \(tokenRange.count) bytes, not \(BinaryProtocol.deviceTokenLength)")
        }
        guard let payloadRange = items[.payload], !payloadRange.isEmpty else {
            return fail(.missingPayload, "no payload item")
        }
        guard payloadRange.count <= BinaryProtocol.maxPayloadLength else {
            return fail(.invalidPayloadSize, "payload is \(payloadRange.count) bytes, more than \(BinaryProtocol.maxPayloadLength)")
        }
        var expiration: UInt32? = nil
        if let range = items[.expirationDate] {
            guard range.count == 4 else { return fail(.protocolError, "expiration item is \(range.count) bytes, not 4") }
            expiration = bytes.readBigEndianUInt32(at: range.lowerBound)
        }
        var priority: UInt8? = nil
        if let range = items[.priority] {
            guard range.count == 1 else { return fail(.protocolError, "priority item is \(range.count) bytes, not 1") }
            priority = bytes[range.lowerBound]
        }
        let frame = BinaryNotificationFrame(
            deviceToken: Array(bytes[tokenRange]), payload: Array(bytes[payloadRange]),
            identifier: identifier, expiration: expiration, priority: priority)
        return .frame(frame, consumed: end)
    }
}

/// Where each item's data lies in the buffer: five slots instead of a dictionary, so decoding a
/// frame allocates nothing but the token and payload arrays.
private struct ItemRanges {
    private var deviceToken: Range<Int>?
    private var payload: Range<Int>?
    private var notificationIdentifier: Range<Int>?
    private var expirationDate: Range<Int>?
    private var priority: Range<Int>?

    subscript(item: BinaryProtocol.Item) -> Range<Int>? {
        get {
            switch item {
            case .deviceToken: return deviceToken
            case .payload: return payload
            case .notificationIdentifier: return notificationIdentifier
            case .expirationDate: return expirationDate
            case .priority: return priority
            }
        }
        set {
            switch item {
            case .deviceToken: deviceToken = newValue
            case .payload: payload = newValue
            case .notificationIdentifier: notificationIdentifier = newValue
            case .expirationDate: expirationDate = newValue
            case .priority: priority = newValue
            }
        }
    }
}

/// What decoding a notification frame from the front of a buffer gave.
public enum BinaryFrameDecodeResult: Sendable, Hashable {
    /// The buffer holds the beginning of a valid frame and nothing wrong so far.
    case needMoreData
    /// A complete frame, and how many bytes of the buffer it used.
    case frame(BinaryNotificationFrame, consumed: Int)
    /// Apple would answer this with an error response and close the connection.
    case invalid(BinaryFrameDecodingError)
}

/// A frame the decoder refuses, with the error response Apple would send for it.
public struct BinaryFrameDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    public var status: BinaryStatus
    /// The frame's notification identifier, when it could be read before the fault.
    public var identifier: UInt32?
    public var message: String

    public init(status: BinaryStatus, identifier: UInt32?, message: String) {
        self.status = status
        self.identifier = identifier
        self.message = message
    }

    /// The error response for this fault (identifier 0 when the frame had none).
    public var response: BinaryErrorResponse {
        BinaryErrorResponse(status: status, identifier: identifier ?? 0)
    }

    public var description: String { "binary status \(status): \(message)" }
}

/// A frame that cannot be encoded.
public enum BinaryFramingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Item data longer than its 2-byte length field can express.
    case itemTooLong(item: BinaryProtocol.Item, length: Int)
    /// A notification value that does not fit its item (negative or too large).
    case valueOutOfRange(item: BinaryProtocol.Item, value: Int)
    /// A broadcast (channel) notification: the binary provider API has none (`JobParser` makes
    /// such a job malformed on a binary bundle, so this is a second line of defence).
    case broadcastUnsupported

    public var description: String {
        switch self {
        case .broadcastUnsupported: return "the binary provider API has no broadcast notifications"
        case .itemTooLong(let item, let length): return "item \(item) is \(length) bytes, more than \(UInt16.max)"
        case .valueOutOfRange(let item, let value): return "value \(value) does not fit item \(item)"
        }
    }
}

/// An error response (command 8): Apple names the failed frame, then closes the connection.
public struct BinaryErrorResponse: Sendable, Hashable {
    public var status: BinaryStatus
    public var identifier: UInt32

    public init(status: BinaryStatus, identifier: UInt32) {
        self.status = status
        self.identifier = identifier
    }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = [BinaryProtocol.errorResponseCommand, status.rawValue]
        out.appendBigEndian(identifier)
        return out
    }

    public enum DecodeResult: Sendable, Hashable {
        case needMoreData
        /// A response; it always used `BinaryProtocol.errorResponseLength` bytes.
        case response(BinaryErrorResponse)
        /// The first byte is not command 8: the peer is not speaking this protocol.
        case invalid(command: UInt8)
    }

    public static func decode(_ bytes: [UInt8]) -> DecodeResult {
        bytes.withUnsafeBytes { decode($0) }
    }

    public static func decode(_ bytes: UnsafeRawBufferPointer) -> DecodeResult {
        guard let command = bytes.first else { return .needMoreData }
        guard command == BinaryProtocol.errorResponseCommand else { return .invalid(command: command) }
        guard bytes.count >= BinaryProtocol.errorResponseLength else { return .needMoreData }
        return .response(BinaryErrorResponse(
            status: BinaryStatus(rawValue: bytes[1]), identifier: bytes.readBigEndianUInt32(at: 2)))
    }
}

extension [UInt8] {
    fileprivate mutating func appendBigEndian(_ value: UInt32) {
        append(UInt8(truncatingIfNeeded: value >> 24))
        append(UInt8(truncatingIfNeeded: value >> 16))
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    fileprivate mutating func appendBigEndian(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    fileprivate mutating func appendItem(_ item: BinaryProtocol.Item, _ data: [UInt8]) {
        append(item.rawValue)
        appendBigEndian(UInt16(data.count))
        append(contentsOf: data)
    }
}

extension UnsafeRawBufferPointer {
    fileprivate func readBigEndianUInt32(at offset: Int) -> UInt32 {
        UInt32(self[offset]) << 24 | UInt32(self[offset + 1]) << 16 | UInt32(self[offset + 2]) << 8 | UInt32(self[offset + 3])
    }

    fileprivate func readBigEndianUInt16(at offset: Int) -> UInt16 {
        UInt16(self[offset]) << 8 | UInt16(self[offset + 1])
    }
}
