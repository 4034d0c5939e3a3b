import APNSBinaryProtocol
import Testing

/// The feedback service's tuples against a byte vector worked out by hand: time (4, big-endian),
/// token length (2, big-endian), token; and the streaming decoder fed in every split.
@Suite struct FeedbackTupleTests {
    /// Time 1 700 000 000 = 0x6553F100, length 32 = 0x0020, token 01 02 … 20.
    static let tupleBytes: [UInt8] = [0x65, 0x53, 0xF1, 0x00, 0x00, 0x20] + Array(1...32)
    static let tuple = FeedbackTuple(timestamp: 1_700_000_000, deviceToken: Array(1...32))

    @Test("encodes to the hand-written bytes and decodes back")
    func roundTrip() {
        var bytes: [UInt8] = []
        Self.tuple.encode(into: &bytes)
        #expect(bytes == Self.tupleBytes)
        #expect(FeedbackTuple.decode(bytes) == .tuple(Self.tuple, consumed: 38))
    }

    @Test("every proper prefix needs more data")
    func prefixes() {
        for length in 0..<Self.tupleBytes.count {
            #expect(FeedbackTuple.decode(Array(Self.tupleBytes.prefix(length))) == .needMoreData, "prefix \(length)")
        }
    }

    @Test("a token length other than 32 is refused as soon as the length field arrives", arguments: [0, 1, 31, 33, 64, 65535])
    func wrongTokenLength(_ length: Int) {
        let header: [UInt8] = [0, 0, 0, 1, UInt8(length >> 8), UInt8(length & 0xff)]
        guard case .invalid(let error) = FeedbackTuple.decode(header) else {
            Issue.record("length \(length) was not refused")
            return
        }
        #expect(error.message.contains("token length \(length)"))
    }

    @Test("the stream decoder yields the same tuples however the bytes are split")
    func streamingSplits() throws {
        let second = FeedbackTuple(timestamp: 7, deviceToken: Array(repeating: 0xab, count: 32))
        var stream = Self.tupleBytes
        second.encode(into: &stream)
        for split in 0...stream.count {
            var decoder = FeedbackStreamDecoder()
            var tuples = try decoder.feed(stream[..<split])
            tuples += try decoder.feed(stream[split...])
            try decoder.finish()
            #expect(tuples == [Self.tuple, second], "split at \(split)")
        }
        var bytewise = FeedbackStreamDecoder()
        var tuples: [FeedbackTuple] = []
        for byte in stream { tuples += try bytewise.feed([byte]) }
        #expect(tuples == [Self.tuple, second])
    }

    @Test("a stream that ends inside a tuple, or loses its framing, is an error naming the offset")
    func strictEnd() throws {
        var decoder = FeedbackStreamDecoder()
        #expect(try decoder.feed(Self.tupleBytes + Self.tupleBytes.prefix(10)) == [Self.tuple])
        #expect(throws: FeedbackDecodingError(message: "stream ended 10 bytes into a tuple at byte 38")) { try decoder.finish() }

        var desynchronised = FeedbackStreamDecoder()
        #expect(throws: FeedbackDecodingError(message: "token length 288, not 32 at byte 38")) {
            _ = try desynchronised.feed(Self.tupleBytes + [0, 0, 0, 1, 1, 32])
        }
        #expect(throws: Never.self) { try FeedbackStreamDecoder().finish() }
    }

    @Test("past its tuple count the decoder keeps nothing more and the stream may end anywhere")
    func theTupleCountIsBounded() throws {
        var stream: [UInt8] = []
        for n in 0..<5 { FeedbackTuple(timestamp: UInt32(n), deviceToken: Array(repeating: UInt8(n), count: 32)).encode(into: &stream) }
        var decoder = FeedbackStreamDecoder(maximumTuples: 3)
        // In one piece and over several: three tuples, then nothing, even bytes that are no tuple.
        let tuples = try decoder.feed(stream)
        #expect(tuples.map(\.timestamp) == [0, 1, 2])
        #expect(decoder.isFull && decoder.decoded == 3)
        #expect(try decoder.feed(stream + [0, 0, 0, 1, 1, 32]).isEmpty)
        #expect(throws: Never.self) { try decoder.finish() }

        var piecewise = FeedbackStreamDecoder(maximumTuples: 3)
        var kept: [FeedbackTuple] = []
        for byte in stream.prefix(4 * 38 + 7) { kept += try piecewise.feed([byte]) }
        #expect(kept.map(\.timestamp) == [0, 1, 2] && piecewise.isFull)
        #expect(throws: Never.self) { try piecewise.finish() }
        #expect(FeedbackStreamDecoder().maximumTuples == FeedbackStreamDecoder.defaultMaximumTuples)
    }

}
