import AMQPClient
import APNSConfig
import APNSCore
import APNSTopology
import APNSTracing
import Logging
import Testing
import Tracing
import W3CTraceContext

/// The tracer `[tracing]` makes (swift-otel), without a collector: the producer's context read
/// from a job's headers is continued (same trace, new span), and what it injects into a job is
/// what the worker reads back.
@Suite struct TracingBackendTests {
    static let producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func aJobContinuesTheProducersTraceThroughSwiftOTel() throws {
        let (tracer, _) = try TracingBackend.make(TracingSettings(endpoint: "http://127.0.0.1:9"), logger: Logger(label: "test"))
        let received = JobEnvelope([JobHeaders.traceParent: .string(Self.producer), JobHeaders.traceState: .string("rojo=1")])
        let producer = try #require(received.traceContext)
        var parent = ServiceContext.topLevel
        tracer.extract(producer, into: &parent, using: TraceContextExtractor())
        let span = tracer.startSpan("process job", context: parent, ofKind: .consumer)
        var published = JobEnvelope(nil)
        tracer.inject(span.context, into: &published, using: JobEnvelopeTraceInjector())
        span.end()
        let child = try #require(published.traceContext)
        #expect(child.traceID == producer.traceID)
        #expect(child.spanID != producer.spanID)
        #expect(child.flags.contains(.sampled), "parent-based: the producer sampled it")
        #expect(child.traceStateHeaderValue == "rojo=1")
    }

    @Test func ratioZeroWithoutParentBasedSamplesNothing() throws {
        var settings = TracingSettings(endpoint: "http://127.0.0.1:9")
        settings.sampleRatio = 0
        settings.parentBased = false
        let (tracer, _) = try TracingBackend.make(settings, logger: Logger(label: "test"))
        var parent = ServiceContext.topLevel
        tracer.extract(try TraceContext(traceParentHeaderValue: Self.producer), into: &parent, using: TraceContextExtractor())
        let span = tracer.startSpan("process job", context: parent)
        var published = JobEnvelope(nil)
        tracer.inject(span.context, into: &published, using: JobEnvelopeTraceInjector())
        span.end()
        #expect(!span.isRecording)
        #expect(published.traceContext.map { !$0.flags.contains(.sampled) } ?? true)
    }
}
