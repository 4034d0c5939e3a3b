// libFuzzer target: the client's DeliveryEvent.parse on arbitrary bodies of `apns.events`
// (contract §8), which anyone with publish rights on the exchange can send to a sync server and
// to `apns-worker events`. What it accepts must obey the event's schema, since a sync server acts
// on it (logs a dead job's reason, prunes a token).
import APNSJSON
import APNSModel
import APNSWorkerClient
import Foundation
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzDeliveryEvent_main")
public func fuzzDeliveryEventMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzDeliveryEvent(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzDeliveryEvent(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDeliveryEvent(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Array(UnsafeBufferPointer(start: data, count: size))
    let event = DeliveryEvent.parse(body)
    guard DeliveryEvent.parse(body) == event else { fatalError("DeliveryEvent.parse gave two answers for one body") }
    guard let event else {
        // `apns-worker events` prints the refusal's reason to a person's terminal.
        do {
            _ = try DeliveryEvent.parseOrThrow(body)
            fatalError("parseOrThrow took a body parse refused")
        } catch {
            if let control = firstControl(error.message) { fatalError("the refusal shows control character U+\(String(control, radix: 16)): \(error.message.debugDescription)") }
        }
        return 0
    }
    guard body.count <= DeliveryEvents.maxBodyBytes else { fatalError("accepted a body over the bound") }
    guard UUID(uuidString: event.jobID) != nil else { fatalError("accepted jobId \(event.jobID.debugDescription)") }
    guard UntrustedText.isBundleID(event.bundleID) else { fatalError("accepted bundleId \(event.bundleID.debugDescription)") }
    guard (0...Int(Int32.max)).contains(event.status), (0...Int(Int32.max)).contains(event.attempts) else {
        fatalError("accepted status \(event.status) or attempts \(event.attempts)")
    }
    guard ["production", "sandbox"].contains(event.environment) else { fatalError("accepted environment \(event.environment.debugDescription)") }
    if let reason = event.reason, !UntrustedText.isPlain(reason, maxBytes: 1024) { fatalError("accepted reason \(reason.debugDescription)") }
    if let group = event.groupJobID, UUID(uuidString: group) == nil { fatalError("accepted groupJobId \(group.debugDescription)") }
    switch event.target {
    case .token(let hex)?:
        guard DeviceToken(hex: hex) != nil, hex.utf8.count <= 200 else { fatalError("accepted token \(hex.debugDescription)") }
    case .channel(let id)?:
        guard BroadcastChannel.problem(id) == nil else { fatalError("accepted channel \(id.debugDescription)") }
    case nil:
        break
    }
    // `apns-worker events` prints this line to a person's terminal.
    if let control = firstControl(event.line) { fatalError("the line shows control character U+\(String(control, radix: 16)): \(event.line.debugDescription)") }
    return 0
}

/// The first character in `text` that a line a person reads must not show (`LineSafeText.breaksALine`).
func firstControl(_ text: String) -> UInt32? {
    text.unicodeScalars.first(where: LineSafeText.breaksALine)?.value
}
