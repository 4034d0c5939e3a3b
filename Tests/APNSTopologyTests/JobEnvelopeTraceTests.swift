import AMQPClient
import APNSTopology
import APNSTopologyNames
import Testing
import Tracing
import W3CTraceContext

/// The producer's W3C trace context on a job: read through `JobEnvelope` with the limits of a
/// header anyone may set (garbage, oversized, other types, other versions: absent, never a
/// crash), written so that it reads back, and handed to and from a tracer.
@Suite struct JobEnvelopeTraceTests {
    static let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    @Test func aValidTraceparentAndTracestateAreRead() throws {
        let envelope = JobEnvelope([JobHeaders.traceParent: .string(Self.parent), JobHeaders.traceState: .string("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")])
        let context = try #require(envelope.traceContext)
        #expect(context.traceParentHeaderValue == Self.parent)
        #expect(context.flags.contains(.sampled))
        #expect(context.traceStateHeaderValue == "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7")
        // AMQP long strings may arrive as bytes.
        #expect(JobEnvelope([JobHeaders.traceParent: .bytes(Array(Self.parent.utf8))]).traceContext?.traceID == context.traceID)
    }

    static let hostileParents: [AMQPFieldValue] = [
        .string(""), .string("garbage"), .string(String(repeating: "0", count: 55)),
        .string("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),  // another version
        .string("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),  // the forbidden version
        .string("00-00000000000000000000000000000000-b7ad6b7169203331-01"),  // all-zero trace id
        .string("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"),  // all-zero span id
        .string("00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01"),  // not hex
        .string("00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01"),  // delimiters
        .string(parent + "-extra"), .string(parent + String(repeating: "x", count: 1_000_000)),
        .string(String(repeating: "é", count: 27) + "a"),  // 55 bytes, not ASCII
        .bytes([0xff, 0xfe] + Array(repeating: 0x30, count: 53)), .bytes(Array(repeating: 0, count: 55)),
        .int32(1), .bool(true), .void, .table([JobHeaders.traceParent: .string(parent)]), .array([.string(parent)]),
    ]

    @Test(arguments: hostileParents)
    func aHostileTraceparentCountsAsAbsent(value: AMQPFieldValue) {
        let envelope = JobEnvelope([JobHeaders.traceParent: value, JobHeaders.traceState: .string("a=b")])
        #expect(envelope.traceContext == nil)
    }

    @Test(arguments: [
        AMQPFieldValue.string("not a list member"), .string(String(repeating: "k=v,", count: 200)), .int64(3), .bytes([0xff]),
        .string("a=" + String(repeating: "v", count: 600)),
    ])
    func aHostileTracestateIsDroppedAndTheTraceparentKept(value: AMQPFieldValue) throws {
        let context = try #require(JobEnvelope([JobHeaders.traceParent: .string(Self.parent), JobHeaders.traceState: value]).traceContext)
        #expect(context.traceParentHeaderValue == Self.parent)
        #expect(context.state.isEmpty)
    }

    @Test func whatIsWrittenReadsBackAndOtherHeadersStay() throws {
        let context = try TraceContext(traceParentHeaderValue: Self.parent, traceStateHeaderValue: "rojo=00f067aa0ba902b7")
        var envelope = JobEnvelope(["x-other": .string("kept"), JobHeaders.attempt: .int32(2)])
        envelope.setTraceContext(context)
        #expect(envelope.traceContext == context)
        #expect(envelope.headers[JobHeaders.traceParent] == .string(Self.parent))
        envelope.forward()
        #expect(envelope.traceContext == context, "a retried job continues the producer's trace")
        envelope.setTraceContext(nil)
        #expect(envelope.headers == ["x-other": .string("kept"), JobHeaders.attempt: .int32(2)])
    }

    @Test func theInjectorWritesOnlyValidTraceContext() {
        let injector = JobEnvelopeTraceInjector()
        var envelope = JobEnvelope(nil)
        injector.inject("garbage", forKey: JobHeaders.traceParent, into: &envelope)
        injector.inject("a=b", forKey: JobHeaders.traceState, into: &envelope)
        injector.inject("b3-value", forKey: "b3", into: &envelope)
        #expect(envelope.amqpHeaders == nil, "nothing invalid, nothing without a traceparent, no other propagator's keys")
        injector.inject(Self.parent, forKey: JobHeaders.traceParent, into: &envelope)
        injector.inject("rojo=00f067aa0ba902b7", forKey: JobHeaders.traceState, into: &envelope)
        injector.inject("bad state !", forKey: JobHeaders.traceState, into: &envelope)
        #expect(envelope.headers[JobHeaders.traceParent] == .string(Self.parent))
        #expect(envelope.headers[JobHeaders.traceState] == .string("rojo=00f067aa0ba902b7"))
    }

    @Test func theExtractorHandsBothHeadersToATracer() throws {
        let context = try TraceContext(traceParentHeaderValue: Self.parent, traceStateHeaderValue: "rojo=00f067aa0ba902b7")
        let extractor = TraceContextExtractor()
        #expect(extractor.extract(key: "traceparent", from: context) == Self.parent)
        #expect(extractor.extract(key: "tracestate", from: context) == "rojo=00f067aa0ba902b7")
        #expect(extractor.extract(key: "baggage", from: context) == nil)
    }
}
