// libFuzzer target: what the worker reads of an APNs answer (`HTTP2Response.answer`): the
// `apns-id` header (parsed by hand, `LowercaseHex.uuid`) and the JSON body. The first byte is the
// length of the header value; the rest after the value is the body. The id must be read exactly
// when the value is the canonical 8-4-4-4-12 form, and then be the UUID Foundation reads.
import APNSModel
import Foundation
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzAPNsAnswer_main")
public func fuzzAPNsAnswerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzAPNsAnswer(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzAPNsAnswer(data, size)
    }
}

/// The canonical form, checked character by character: an independent model of what
/// `LowercaseHex.uuid` accepts.
private func isCanonicalUUIDText(_ bytes: ArraySlice<UInt8>) -> Bool {
    guard bytes.count == 36 else { return false }
    for (offset, byte) in bytes.enumerated() {
        if [8, 13, 18, 23].contains(offset) {
            guard byte == UInt8(ascii: "-") else { return false }
        } else {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
            else { return false }
        }
    }
    return true
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAPNsAnswer(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let valueLength = min(Int(input[0]), size - 1)
    let valueBytes = input[1..<(1 + valueLength)]
    let body = Array(input[(1 + valueLength)...])
    let value = String(decoding: valueBytes, as: UTF8.self)

    let answer = HTTP2Response.answer(status: 400, headers: [HTTP2HeaderField("apns-id", value)], body: body)
    // Decoding repaired invalid UTF-8, so the model looks at the string's bytes, as the parser does.
    let canonical = isCanonicalUUIDText(ArraySlice(value.utf8))
    precondition((answer.apnsID != nil) == canonical, "apns-id \(value.debugDescription): read \(String(describing: answer.apnsID))")
    if let id = answer.apnsID {
        precondition(id == UUID(uuidString: value), "apns-id \(value): \(id) is not Foundation's reading")
        precondition(LowercaseHex.string(id) == value.lowercased(), "apns-id \(value) does not print back")
    }
    return 0
}
