// libFuzzer target: the client's FeedbackEvent.parse on arbitrary bodies of `apns.feedback`
// (contract §4, §7), which anyone with publish rights on the exchange can send to a sync server.
// What it accepts must obey the event's schema: a sync server deletes the token it names.
import APNSModel
import APNSWorkerClient
import Foundation
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzFeedbackEvent_main")
public func fuzzFeedbackEventMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzFeedbackEvent(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzFeedbackEvent(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFeedbackEvent(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Array(UnsafeBufferPointer(start: data, count: size))
    let result = FeedbackEvent.parse(body)
    guard FeedbackEvent.parse(body) == result else { fatalError("FeedbackEvent.parse gave two answers for one body") }
    guard case .success(let event) = result else { return 0 }
    guard body.count <= FeedbackEvent.maxBodyBytes else { fatalError("accepted a body over the bound") }
    guard UntrustedText.isBundleID(event.bundleID) else { fatalError("accepted bundleId \(event.bundleID.debugDescription)") }
    guard UntrustedText.isPlain(event.reason, maxBytes: 1024) else { fatalError("accepted reason \(event.reason.debugDescription)") }
    if let timestamp = event.timestamp, timestamp < 0 { fatalError("accepted timestamp \(timestamp)") }
    if let job = event.jobID, UUID(uuidString: job) == nil { fatalError("accepted jobId \(job.debugDescription)") }
    switch event.target {
    case .token(let hex):
        // Handed on in lower case, as the worker writes it and a registry keeps it.
        guard DeviceToken(hex: hex) != nil, hex.utf8.count <= 200, hex == hex.lowercased() else { fatalError("accepted token \(hex.debugDescription)") }
    case .channel(let id):
        guard BroadcastChannel.problem(id) == nil else { fatalError("accepted channel \(id.debugDescription)") }
    }
    return 0
}
