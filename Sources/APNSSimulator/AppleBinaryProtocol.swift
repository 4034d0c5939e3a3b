/// Apple's legacy binary provider API as the simulator reads and writes it, stated on its own.
///
/// The simulator is the peer of every binary transport test, so it must not decode frames with
/// the product's `BinaryNotificationFrame.decode`: a wrong rule there would pass on both sides.
/// Source: Apple's "The Binary Provider API" (Local and Remote Notification Programming Guide,
/// legacy): a notification is command 2, a 4-byte big-endian frame length, then items, each an
/// id byte, a 2-byte length and data. Item 1 device token (32 bytes), 2 payload (at most 2 KB),
/// 3 notification identifier (4 bytes), 4 expiration date (4 bytes), 5 priority (1 byte, 10 or 5).
/// A failed frame gets an error response (command 8, a status byte, the frame's identifier).
/// The feedback service sends tuples of a 4-byte time, a 2-byte token length and the token.
import NIOCore

enum AppleBinaryProtocol {
    static let notificationCommand: UInt8 = 2
    static let errorResponseCommand: UInt8 = 8
    static let tokenBytes = 32
    static let payloadLimitBytes = 2048

    /// The status codes of Apple's table "Codes in error-response packet".
    enum Status {
        static let processingError: UInt8 = 1
        static let missingDeviceToken: UInt8 = 2
        static let missingPayload: UInt8 = 4
        static let invalidTokenSize: UInt8 = 5
        static let invalidPayloadSize: UInt8 = 7
        static let invalidToken: UInt8 = 8
        static let shutdown: UInt8 = 10
        static let protocolError: UInt8 = 128
        static let unknown: UInt8 = 255
    }

    /// A notification as the gateway received it.
    struct Frame: Sendable, Hashable {
        var token: [UInt8]
        var payload: [UInt8]
        var identifier: UInt32?
        var expiration: UInt32?
        var priority: UInt8?
    }

    /// A frame the gateway refuses: the status Apple answered with and the identifier it names
    /// (0 when the frame had none, or it could not be read).
    struct Refusal: Error, Sendable, Hashable {
        var status: UInt8
        var identifier: UInt32
        var reason: String
    }

    enum ReadResult: Sendable, Hashable {
        case needMoreData
        case frame(Frame)
        case refused(Refusal)
    }

    /// The largest frame holding each of the five items once; a longer declared length can never
    /// be a valid notification, so it is refused before its bytes are buffered.
    static let frameLengthLimit = 5 * (3 + Int(UInt16.max))

    /// Reads the first frame from `buffer`, moving its reader index past it; on `needMoreData`
    /// the buffer is left as it was.
    static func readFrame(from buffer: inout ByteBuffer) -> ReadResult {
        var view = buffer
        guard let command = view.readInteger(as: UInt8.self) else { return .needMoreData }
        guard command == notificationCommand else {
            return .refused(Refusal(status: Status.protocolError, identifier: 0, reason: "command \(command) is not 2"))
        }
        guard let length = view.readInteger(endianness: .big, as: UInt32.self) else { return .needMoreData }
        guard Int(length) <= frameLengthLimit else {
            return .refused(Refusal(status: Status.protocolError, identifier: 0, reason: "frame length \(length) is impossible"))
        }
        guard var items = view.readSlice(length: Int(length)) else { return .needMoreData }
        buffer = view

        var seen: [UInt8: ByteBuffer] = [:]
        while items.readableBytes > 0 {
            guard let id = items.readInteger(as: UInt8.self), let itemLength = items.readInteger(endianness: .big, as: UInt16.self)
            else { return refuse(Status.protocolError, seen, "an item header is cut off") }
            guard let data = items.readSlice(length: Int(itemLength)) else {
                return refuse(Status.protocolError, seen, "item \(id) is longer than its frame")
            }
            guard (1...5).contains(id) else { return refuse(Status.protocolError, seen, "item id \(id) is not Apple's") }
            guard seen[id] == nil else { return refuse(Status.protocolError, seen, "item \(id) appears twice") }
            seen[id] = data
        }
        if let identifier = seen[3], identifier.readableBytes != 4 {
            return refuse(Status.protocolError, seen, "the identifier is \(identifier.readableBytes) bytes")
        }
        guard let token = seen[1], token.readableBytes > 0 else { return refuse(Status.missingDeviceToken, seen, "no token") }
        guard token.readableBytes == tokenBytes else {
            return refuse(Status.invalidTokenSize, seen, "the token is \(token.readableBytes) bytes")
        }
        guard let payload = seen[2], payload.readableBytes > 0 else { return refuse(Status.missingPayload, seen, "no payload") }
        guard payload.readableBytes <= payloadLimitBytes else {
            return refuse(Status.invalidPayloadSize, seen, "the payload is \(payload.readableBytes) bytes")
        }
        var expiration: UInt32?
        if let item = seen[4] {
            guard item.readableBytes == 4 else { return refuse(Status.protocolError, seen, "the expiration is \(item.readableBytes) bytes") }
            expiration = item.getInteger(at: item.readerIndex, endianness: .big, as: UInt32.self)
        }
        var priority: UInt8?
        if let item = seen[5] {
            guard item.readableBytes == 1 else { return refuse(Status.protocolError, seen, "the priority is \(item.readableBytes) bytes") }
            priority = item.getInteger(at: item.readerIndex, as: UInt8.self)
        }
        return .frame(Frame(
            token: Array(token.readableBytesView), payload: Array(payload.readableBytesView),
            identifier: identifier(in: seen), expiration: expiration, priority: priority))
    }

    private static func identifier(in items: [UInt8: ByteBuffer]) -> UInt32? {
        guard let item = items[3], item.readableBytes == 4 else { return nil }
        return item.getInteger(at: item.readerIndex, endianness: .big, as: UInt32.self)
    }

    private static func refuse(_ status: UInt8, _ items: [UInt8: ByteBuffer], _ reason: String) -> ReadResult {
        .refused(Refusal(status: status, identifier: identifier(in: items) ?? 0, reason: reason))
    }

    /// The 6-byte error response naming `identifier`.
    static func writeErrorResponse(status: UInt8, identifier: UInt32, into buffer: inout ByteBuffer) {
        buffer.writeInteger(errorResponseCommand)
        buffer.writeInteger(status)
        buffer.writeInteger(identifier, endianness: .big)
    }

    /// One feedback tuple: when Apple found the app gone, and the token.
    static func writeFeedbackTuple(timestamp: UInt32, token: [UInt8], into buffer: inout ByteBuffer) {
        buffer.writeInteger(timestamp, endianness: .big)
        buffer.writeInteger(UInt16(token.count), endianness: .big)
        buffer.writeBytes(token)
    }
}
