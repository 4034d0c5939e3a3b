// libFuzzer target: JobParser.parse on arbitrary job bodies. The first byte picks the transport,
// the default environment and whether a message_id comes with the job; the rest is the body.
import APNSJSON
import APNSModel
import Foundation
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzJobParser_main")
public func fuzzJobParserMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzJobParser(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzJobParser(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJobParser(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let selector = data[0]
    let body = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let transport: TransportKind = selector & 1 == 0 ? .http2 : .binary
    let environment: APNSEnvironment = selector & 2 == 0 ? .production : .sandbox
    let messageID: String? = switch (selector >> 2) & 3 {
    case 0: nil
    case 1: "6F9619FF-8B86-D011-B42D-00C04FC964FF"
    case 2: "not-a-uuid"
    default: ""
    }
    let fixedID = UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
    let result = JobParser.parse(
        body: body, bundleID: "com.example.app", messageID: messageID, defaultEnvironment: environment,
        transport: transport, makeID: { fixedID })
    // Parsing is a pure function: the same input gives the same answer.
    let again = JobParser.parse(
        body: body, bundleID: "com.example.app", messageID: messageID, defaultEnvironment: environment,
        transport: transport, makeID: { fixedID })
    switch (result, again) {
    case (.success, .success), (.failure, .failure): break
    default: fatalError("JobParser.parse gave two different answers for one body")
    }
    // The parser skims the payload instead of building it (JSONSkim.swift): it must still call
    // a body bad JSON exactly when the reader that builds every value does.
    if body.count <= JobParser.Limits().maxBodyBytes, body.first(where: { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }) == UInt8(ascii: "{") {
        let builtReaderAccepts = (try? JSONValue(parsing: body)) != nil
        var parserRefusesTheText = false
        if case .failure(let error) = result, error.field == "body" {
            parserRefusesTheText = error.message.hasPrefix("invalid JSON") || error.message.contains("not valid UTF-8")
        }
        if builtReaderAccepts == parserRefusesTheText {
            fatalError("JobParser and JSONValue(parsing:) disagree on whether this body is JSON")
        }
    }
    return 0
}
