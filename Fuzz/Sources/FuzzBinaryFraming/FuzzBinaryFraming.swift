// libFuzzer target: the binary provider API's notification frame decoder and error-response
// decoder on arbitrary bytes, read as a stream of frames. A decoded frame never claims more bytes
// than it got, and its encoding decodes to the same frame (the items' order may differ from the
// input's, so the bytes need not be the same); an error response encodes to the bytes it came from.
import APNSBinaryProtocol
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzBinaryFraming_main")
public func fuzzBinaryFramingMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzBinaryFraming(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzBinaryFraming(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBinaryFraming(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)

    // A stream of frames, decoded the way a reader of a socket would.
    var offset = 0
    while offset < size {
        switch BinaryNotificationFrame.decode(UnsafeRawBufferPointer(rebasing: bytes[offset...])) {
        case .needMoreData, .invalid:
            offset = size
        case .frame(let frame, let consumed):
            precondition(consumed > 0 && consumed <= size - offset, "frame consumed \(consumed) of \(size - offset) bytes")
            if let encoded = try? frame.encoded() {
                guard case .frame(let decoded, let used) = BinaryNotificationFrame.decode(encoded),
                      decoded == frame, used == encoded.count
                else { fatalError("a decoded frame does not survive encoding and decoding") }
            }
            offset += consumed
        }
    }

    switch BinaryErrorResponse.decode(bytes) {
    case .needMoreData:
        precondition(size < BinaryProtocol.errorResponseLength)
    case .invalid(let command):
        precondition(command != BinaryProtocol.errorResponseCommand)
    case .response(let response):
        precondition(response.encoded().elementsEqual(bytes.prefix(BinaryProtocol.errorResponseLength)))
    }
    return 0
}
