import AMQPClient
import APNSConfig
import APNSTopology
import APNSTopologyNames
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
        var settings = TracingSettings(endpoint: "http://127.0.0.1:9")
        settings.parentBased = true
        let (tracer, _) = try TracingBackend.make(settings, logger: Logger(label: "test"))
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

    /// By default a publisher's sampled `traceparent` does not decide: the span starts
    /// a trace of the worker's own (linked to the producer's), and `sampleRatio` 0 records nothing.
    @Test func aProducersSampledFlagDoesNotForceSamplingByDefault() throws {
        var settings = TracingSettings(endpoint: "http://127.0.0.1:9")
        settings.sampleRatio = 0
        let (tracer, _) = try TracingBackend.make(settings, logger: Logger(label: "test"))
        let producer = try TraceContext(traceParentHeaderValue: Self.producer)
        let span = ConsumerSpan.start("process job", tracer: tracer, producer: producer, continuesProducerTrace: settings.parentBased)
        var published = JobEnvelope(nil)
        tracer.inject(span.context, into: &published, using: JobEnvelopeTraceInjector())
        #expect(!span.isRecording, "the producer's sampled flag forced sampling")
        span.end()
        #expect(published.traceContext.map { !$0.flags.contains(.sampled) } ?? true)
        // Even a trace id the sampler would keep at any ratio (low half zero) is not the worker's.
        let chosen = try TraceContext(traceParentHeaderValue: "00-4bf92f3577b34da60000000000000000-00f067aa0ba902b7-01")
        var ratio = settings
        ratio.sampleRatio = 0.000001
        let (ratioTracer, _) = try TracingBackend.make(ratio, logger: Logger(label: "test"))
        var recorded = 0
        for _ in 0..<200 {
            let chosenSpan = ConsumerSpan.start("process job", tracer: ratioTracer, producer: chosen, continuesProducerTrace: false)
            if chosenSpan.isRecording { recorded += 1 }
            chosenSpan.end()
        }
        #expect(recorded < 10, "a chosen trace id forced sampling: \(recorded) of 200 recorded")
    }

    /// With the ratio at 1 the worker's span is recorded in a trace of its own, not the producer's.
    @Test func byDefaultTheJobSpanStartsATraceOfTheWorkersOwn() throws {
        let (tracer, _) = try TracingBackend.make(TracingSettings(endpoint: "http://127.0.0.1:9"), logger: Logger(label: "test"))
        let producer = try TraceContext(traceParentHeaderValue: Self.producer)
        let span = ConsumerSpan.start("process job", tracer: tracer, producer: producer, continuesProducerTrace: false)
        var published = JobEnvelope(nil)
        tracer.inject(span.context, into: &published, using: JobEnvelopeTraceInjector())
        #expect(span.isRecording)
        span.end()
        let own = try #require(published.traceContext)
        #expect(own.traceID != producer.traceID)
    }

    /// `parentBased = true` (trusted producers): the producer's span is the parent and its
    /// sampled flag is followed even at ratio 0.
    @Test func parentBasedContinuesTheProducersTraceAndFollowsItsFlag() throws {
        var settings = TracingSettings(endpoint: "http://127.0.0.1:9")
        settings.sampleRatio = 0
        settings.parentBased = true
        let (tracer, _) = try TracingBackend.make(settings, logger: Logger(label: "test"))
        let producer = try TraceContext(traceParentHeaderValue: Self.producer)
        let span = ConsumerSpan.start("process job", tracer: tracer, producer: producer, continuesProducerTrace: true)
        var published = JobEnvelope(nil)
        tracer.inject(span.context, into: &published, using: JobEnvelopeTraceInjector())
        #expect(span.isRecording)
        span.end()
        #expect(published.traceContext?.traceID == producer.traceID)
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
