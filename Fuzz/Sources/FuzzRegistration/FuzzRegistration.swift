// libFuzzer target: RegistrationMessage.parse on arbitrary bodies of `apns.registry` (contract
// §6). What it accepts must obey §6's shapes, since every field becomes a database value.
import APNSModel
import APNSRegistryMessages
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzRegistration_main")
public func fuzzRegistrationMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzRegistration(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzRegistration(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRegistration(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Array(UnsafeBufferPointer(start: data, count: size))
    // A fixed clock, so the two answers compare (`at` is bounded by the reader's clock).
    let now: Int64 = 1_790_000_000_000
    let result = RegistrationMessage.parse(body: body, now: now)
    guard RegistrationMessage.parse(body: body, now: now) == result else { fatalError("RegistrationMessage.parse gave two answers for one body") }
    switch result {
    case .failure(let error):
        guard error.reason == "MalformedJob" else { fatalError("a refusal that is not MalformedJob: \(error)") }
    case .success(let message):
        guard body.count <= RegistrationMessage.maxBodyBytes else { fatalError("accepted a body over 64 KiB") }
        guard UntrustedText.isBundleID(message.bundleID) else { fatalError("accepted bundleId \(message.bundleID.debugDescription)") }
        guard let token = DeviceToken(hex: message.token), message.token.utf8.count <= RegistrationMessage.maxTokenHexDigits,
            message.token == LowercaseHex.string(token.bytes)
        else { fatalError("accepted a token that is not lower-case hex within the cap") }
        switch message.op {
        case .register:
            guard let group = message.group, GroupJob.problem(group: group) == nil else { fatalError("accepted group \(String(describing: message.group))") }
        case .unregister:
            guard message.group == nil else { fatalError("an unregister kept a group") }
        }
        guard message.at >= 0 else { fatalError("accepted a negative at") }
        guard message.at <= now + RegistrationMessage.maxFutureMilliseconds else { fatalError("accepted an at too far ahead of the clock") }
    }
    return 0
}
