// libFuzzer target: the job-header envelope (`JobEnvelope`) as the worker reads a delivery's
// headers, from arbitrary field tables decoded as AMQPClient decodes them. Every count it
// returns is absent or in 0...2^31−1; what it writes it reads back; what it writes encodes. A
// trace context it reads (`traceparent`, `tracestate`) is one it can write and read back.
import AMQPClient
import APNSTopology
import Foundation
import FuzzDriver

@_cdecl("FuzzJobEnvelope_main")
public func fuzzJobEnvelopeMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzJobEnvelope(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzJobEnvelope(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJobEnvelope(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let headers = AMQPWireFormat.decodeTable(bytes) else { return 0 }
    var envelope = JobEnvelope(headers)
    let range = 0...JobEnvelope.maximumCount
    for count in [envelope.attempt, envelope.deliveryCount, envelope.status, envelope.attempts] {
        if let count, !range.contains(count) { fatalError("a count outside 0...2^31-1: \(count)") }
    }
    // What the pipeline does with them: count this attempt and this delivery.
    let attemptsMade = envelope.previousAttempts + 1
    _ = (envelope.deliveryCount ?? 0) + 1
    _ = (envelope.reason, envelope.error, envelope.lastReason, envelope.failedAt)

    var retry = envelope
    retry.forward()
    retry.setAttempt(attemptsMade)
    // Clamped: after 2^31−1 attempts the retry policy has long given up, and the count stays in range.
    guard retry.deliveryCount == nil, retry.attempt == min(attemptsMade, JobEnvelope.maximumCount) else {
        fatalError("a retry's headers do not read back")
    }

    let failedAt = Date(timeIntervalSince1970: 1_700_000_000)
    envelope.forward()
    envelope.record(.init(reason: "MalformedJob", status: 0, attempts: attemptsMade, failedAt: failedAt, error: "x\ny"))
    guard envelope.reason == "MalformedJob", envelope.status == 0, envelope.attempts == min(attemptsMade, JobEnvelope.maximumCount),
        envelope.failedAt == failedAt, envelope.error == "x y"
    else { fatalError("a dead letter's headers do not read back") }
    guard let encoded = AMQPWireFormat.encodeTable(envelope.headers), let again = AMQPWireFormat.decodeTable(encoded) else {
        fatalError("a dead letter's headers do not encode")
    }
    let reread = JobEnvelope(again)
    guard reread.reason == envelope.reason, reread.attempts == envelope.attempts, reread.failedAt == envelope.failedAt else {
        fatalError("a dead letter's headers changed on the wire")
    }

    // The producer's trace context, as `[tracing]` reads it: absent, or valid and stable.
    if let trace = reread.traceContext {
        var stamped = JobEnvelope(nil)
        stamped.setTraceContext(trace)
        guard trace.traceParentHeaderValue.utf8.count == JobEnvelope.maximumTraceParentBytes, stamped.traceContext == trace else {
            fatalError("a trace context does not read back: \(trace.traceParentHeaderValue)")
        }
    }

    var requeued = reread
    requeued.requeue()
    for name in JobEnvelope.clearedOnRequeue where requeued.headers[name] != nil {
        fatalError("a requeue kept \(name)")
    }
    guard requeued.lastReason == "MalformedJob" else { fatalError("a requeue lost the reason") }
    return 0
}
