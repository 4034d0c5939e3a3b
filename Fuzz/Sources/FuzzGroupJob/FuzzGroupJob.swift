// libFuzzer target: GroupJobParser.parse on arbitrary bodies of `apns.groups` (contract §6). The
// first byte picks the AMQP message_id; the rest is the body. A group job it accepts must have a
// valid group and fan out to device jobs that JobParser accepts.
import APNSModel
import APNSRegistryMessages
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzGroupJob_main")
public func fuzzGroupJobMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzGroupJob(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzGroupJob(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzGroupJob(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let messageID: String? = switch data[0] & 3 {
    case 0: nil
    case 1: "6F9619FF-8B86-D011-B42D-00C04FC964FF"
    case 2: "not-a-uuid"
    default: ""
    }
    let body = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let result = GroupJobParser.parse(body: body, messageID: messageID)
    guard GroupJobParser.parse(body: body, messageID: messageID) == result else { fatalError("GroupJobParser.parse gave two answers for one body") }
    switch result {
    case .failure(let error):
        guard error.reason == "MalformedJob" || error.reason == "PayloadTooLarge" else { fatalError("an unexpected refusal: \(error)") }
    case .success(let job):
        guard GroupJob.problem(group: job.group) == nil else { fatalError("accepted group \(job.group.debugDescription)") }
        // The device jobs of a valid group job are valid jobs (a 32-byte token, either environment).
        let token = String(repeating: "ab", count: 32)
        for environment in [APNSEnvironment.production, .sandbox] {
            let (id, jobBody) = job.jobBody(bundleID: "com.example.app", token: token, environment: environment)
            switch JobParser.parse(body: jobBody, bundleID: "com.example.app", messageID: nil, defaultEnvironment: .production, transport: .http2) {
            case .success(let parsed):
                guard parsed.id == id else { fatalError("a device job's id is not its UUIDv5") }
            case .failure(let error):
                // The device job adds the token, ids and the group to userInfo: it may pass 64 KiB
                // where the group job did not.
                guard error.field == "body", jobBody.count > JobParser.Limits().maxBodyBytes else {
                    fatalError("a valid group job fans out to an invalid device job: \(error)")
                }
            }
        }
    }
    return 0
}
