/// Apple's legacy feedback service on the wire (port 2196): on connect it writes one tuple per
/// device token that stopped accepting notifications, then closes. Tuple: time (4 bytes,
/// big-endian, UNIX seconds), token length (2 bytes, big-endian), token. An encoder for the
/// simulator and a strict streaming decoder for the worker's poller.

/// One token the feedback service reports: the app was gone from the device at `timestamp`.
public struct FeedbackTuple: Sendable, Hashable {
    /// UNIX seconds when APNs found the app gone.
    public var timestamp: UInt32
    public var deviceToken: [UInt8]

    public init(timestamp: UInt32, deviceToken: [UInt8]) {
        self.timestamp = timestamp
        self.deviceToken = deviceToken
    }

    /// Time and token-length fields.
    public static let headerLength = 6
    /// The only token size the binary provider API (and so its feedback service) ever used; the
    /// decoder refuses any other, which also catches a stream that lost its framing.
    public static let tokenLength = BinaryProtocol.deviceTokenLength

    /// Appends the tuple; the token must fit the 2-byte length field.
    public func encode(into buffer: inout [UInt8]) {
        precondition(deviceToken.count <= Int(UInt16.max), "a feedback token longer than \(UInt16.max) bytes")
        buffer.reserveCapacity(buffer.count + Self.headerLength + deviceToken.count)
        buffer.append(UInt8(truncatingIfNeeded: timestamp >> 24))
        buffer.append(UInt8(truncatingIfNeeded: timestamp >> 16))
        buffer.append(UInt8(truncatingIfNeeded: timestamp >> 8))
        buffer.append(UInt8(truncatingIfNeeded: timestamp))
        buffer.append(UInt8(truncatingIfNeeded: deviceToken.count >> 8))
        buffer.append(UInt8(truncatingIfNeeded: deviceToken.count))
        buffer.append(contentsOf: deviceToken)
    }

    /// Decodes the first tuple in `bytes`, strictly: a tuple and the bytes it used,
    /// `needMoreData` for a valid but incomplete prefix, or why the stream cannot be a
    /// feedback stream (decided from the length field, before the token arrives).
    public static func decode(_ bytes: UnsafeRawBufferPointer) -> DecodeResult {
        guard bytes.count >= headerLength else { return .needMoreData }
        let length = Int(bytes[4]) << 8 | Int(bytes[5])
        guard length == tokenLength else {
            return .invalid(FeedbackDecodingError(message: "token length \(length), not \(tokenLength)"))
        }
        guard bytes.count >= headerLength + length else { return .needMoreData }
        let timestamp = UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])
        let tuple = FeedbackTuple(timestamp: timestamp, deviceToken: Array(bytes[headerLength..<(headerLength + length)]))
        return .tuple(tuple, consumed: headerLength + length)
    }

    public static func decode(_ bytes: [UInt8]) -> DecodeResult {
        bytes.withUnsafeBytes { decode($0) }
    }

    public enum DecodeResult: Sendable, Hashable {
        case needMoreData
        case tuple(FeedbackTuple, consumed: Int)
        case invalid(FeedbackDecodingError)
    }
}

/// Bytes that are not a feedback stream.
public struct FeedbackDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(message: String) { self.message = message }
    public var description: String { "invalid feedback stream: \(message)" }
}

/// Decodes a feedback stream as it arrives in pieces: feed each piece, then `finish` at the
/// close, which refuses a tuple cut off in the middle. At most `maximumTuples` are decoded: the
/// stream's length is the peer's choice (only the fetch's time limit bounded it), so past the
/// count the decoder is `full`, keeps nothing more, and the caller closes the connection.
public struct FeedbackStreamDecoder: Sendable {
    private var pending: [UInt8] = []
    /// Bytes consumed so far, for error messages.
    private var offset = 0
    public let maximumTuples: Int
    /// Tuples returned so far.
    public private(set) var decoded = 0
    /// `maximumTuples` were decoded: later bytes are dropped unread.
    public var isFull: Bool { decoded >= maximumTuples }

    /// Tuples one fetch keeps by default: 100,000 × 38 bytes on the wire, about 10 MB decoded.
    /// Apple's service reported the tokens of one provider since its last poll.
    public static let defaultMaximumTuples = 100_000

    public init(maximumTuples: Int = defaultMaximumTuples) {
        self.maximumTuples = max(maximumTuples, 0)
    }

    /// The tuples completed by `bytes`, up to `maximumTuples` in all.
    public mutating func feed(_ bytes: some Sequence<UInt8>) throws(FeedbackDecodingError) -> [FeedbackTuple] {
        guard !isFull else { return [] }
        pending.append(contentsOf: bytes)
        var tuples: [FeedbackTuple] = []
        var start = 0
        while true {
            if isFull {
                pending = []
                return tuples
            }
            let result = pending.withUnsafeBytes { FeedbackTuple.decode(UnsafeRawBufferPointer(rebasing: $0[start...])) }
            switch result {
            case .needMoreData:
                pending.removeFirst(start)
                offset += start
                return tuples
            case .tuple(let tuple, let consumed):
                tuples.append(tuple)
                decoded += 1
                start += consumed
            case .invalid(let error):
                throw FeedbackDecodingError(message: "\(error.message) at byte \(offset + start)")
            }
        }
    }

    /// The stream ended: fine on a tuple boundary (or when full: the rest was not read), an
    /// error inside a tuple.
    public func finish() throws(FeedbackDecodingError) {
        guard pending.isEmpty || isFull else {
            throw FeedbackDecodingError(message: "stream ended \(pending.count) bytes into a tuple at byte \(offset)")
        }
    }
}
