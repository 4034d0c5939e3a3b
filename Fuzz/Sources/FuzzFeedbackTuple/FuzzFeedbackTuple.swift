// libFuzzer target: the feedback service's tuple decoder, whole and streamed. The first byte is
// the chunk size the stream decoder is fed with; the rest is the stream. Feeding in chunks must
// give the same tuples and the same verdict as decoding the whole buffer.
import APNSBinaryProtocol
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzFeedbackTuple_main")
public func fuzzFeedbackTupleMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzFeedbackTuple(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzFeedbackTuple(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFeedbackTuple(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let chunk = Int(data[0]) + 1
    let stream = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))

    // The whole buffer, one tuple after another.
    var whole: [FeedbackTuple] = []
    var wholeValid = true
    var start = 0
    decoding: while true {
        switch stream.withUnsafeBytes({ FeedbackTuple.decode(UnsafeRawBufferPointer(rebasing: $0[start...])) }) {
        case .needMoreData:
            wholeValid = start == stream.count
            break decoding
        case .tuple(let tuple, let consumed):
            precondition(consumed == FeedbackTuple.headerLength + FeedbackTuple.tokenLength)
            precondition(tuple.deviceToken.count == FeedbackTuple.tokenLength)
            var encoded: [UInt8] = []
            tuple.encode(into: &encoded)
            precondition(encoded[...] == stream[start..<(start + consumed)])
            whole.append(tuple)
            start += consumed
        case .invalid:
            wholeValid = false
            break decoding
        }
    }

    // The same bytes in chunks.
    var decoder = FeedbackStreamDecoder()
    var streamed: [FeedbackTuple] = []
    var streamValid = true
    var index = 0
    do throws(FeedbackDecodingError) {
        while index < stream.count {
            let end = min(index + chunk, stream.count)
            streamed += try decoder.feed(stream[index..<end])
            index = end
        }
        try decoder.finish()
    } catch {
        streamValid = false
    }
    precondition(streamValid == wholeValid, "streamed and whole decoding disagree on validity")
    if wholeValid { precondition(streamed == whole, "streamed and whole decoding disagree on the tuples") }
    return 0
}
