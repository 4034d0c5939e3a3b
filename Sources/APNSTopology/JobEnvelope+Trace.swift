import AMQPClient
import APNSTopologyNames
import Tracing
import W3CTraceContext

/// The producer's W3C trace context on a job (`traceparent`, `tracestate`): read and written here,
/// with the job's other headers, and handed to a tracer through `TraceContextExtractor` and
/// `JobEnvelopeTraceInjector`. Parsing is swift-w3c-trace-context's (the parser swift-otel uses);
/// this adds the limits for headers anyone may set: only a short text value is looked at, and
/// anything else (another type, garbage, another version than 00) counts as absent.
extension JobEnvelope {
    /// A `traceparent` of version 00 is 55 bytes; longer ones are not read.
    public static let maximumTraceParentBytes = 55
    /// W3C Trace Context asks to propagate at least 512 bytes of `tracestate`; a longer one is
    /// dropped and the `traceparent` kept (§3.3.1.5 allows dropping it whole).
    public static let maximumTraceStateBytes = 512

    /// The producer's trace context; nil when `traceparent` is absent or invalid. An invalid or
    /// oversized `tracestate` is dropped, the `traceparent` kept (W3C Trace Context §3.3).
    public var traceContext: TraceContext? {
        guard let parent = Self.shortText(headers[JobHeaders.traceParent], limit: Self.maximumTraceParentBytes) else { return nil }
        if let state = Self.shortText(headers[JobHeaders.traceState], limit: Self.maximumTraceStateBytes),
            let context = try? TraceContext(traceParentHeaderValue: parent, traceStateHeaderValue: state)
        {
            return context
        }
        return try? TraceContext(traceParentHeaderValue: parent)
    }

    /// Sets (or, with nil, removes) the trace context a consumer of this message continues.
    public mutating func setTraceContext(_ context: TraceContext?) {
        write(JobHeaders.traceParent, context.map { .string($0.traceParentHeaderValue) })
        write(JobHeaders.traceState, context?.traceStateHeaderValue.map { .string($0) })
    }

    /// A text header's value, if it is one (string or UTF-8 bytes) of at most `limit` bytes.
    static func shortText(_ value: AMQPFieldValue?, limit: Int) -> String? {
        switch value {
        case .string(let text) where text.utf8.count <= limit: text
        case .bytes(let bytes) where bytes.count <= limit: String(validating: bytes, as: UTF8.self)
        default: nil
        }
    }
}

/// Hands a parsed trace context to a tracer's `extract` (any W3C Trace Context propagator).
public struct TraceContextExtractor: Extractor {
    public init() {}

    public func extract(key: String, from carrier: TraceContext) -> String? {
        switch key {
        case JobHeaders.traceParent: carrier.traceParentHeaderValue
        case JobHeaders.traceState: carrier.traceStateHeaderValue
        default: nil
        }
    }
}

/// Writes what a tracer's `inject` produces onto a job: the W3C Trace Context headers only,
/// validated like those of a received job (a value the worker would ignore is not written).
public struct JobEnvelopeTraceInjector: Injector {
    public init() {}

    public func inject(_ value: String, forKey key: String, into carrier: inout JobEnvelope) {
        switch key {
        case JobHeaders.traceParent:
            carrier.setTraceContext(try? TraceContext(traceParentHeaderValue: value))
        case JobHeaders.traceState:
            guard value.utf8.count <= JobEnvelope.maximumTraceStateBytes, let parent = carrier.traceContext,
                let context = try? TraceContext(traceParentHeaderValue: parent.traceParentHeaderValue, traceStateHeaderValue: value)
            else { return }
            carrier.setTraceContext(context)
        default:
            return
        }
    }
}

/// The span of a received message (a job, a group job) and what it makes of the producer's
/// context. Anyone with publish rights on the vhost can put a sampled `traceparent`
/// on a message, so by default the producer's context is not the span's parent: the span starts
/// a trace of the worker's own, which the worker's sampler keeps or drops (`[tracing]
/// sampleRatio` on a trace id the worker chose), with a link to the producer's span so the two
/// traces stay connected. `continuesProducerTrace` (`[tracing] parentBased = true`, for
/// producers the operator trusts) makes the producer's span the parent instead, its sampled
/// flag honoured.
public enum ConsumerSpan {
    public static func start(
        _ name: String, tracer: any Tracer, producer: TraceContext?, continuesProducerTrace: Bool
    ) -> any Span {
        guard let producer else { return tracer.startSpan(name, context: .topLevel, ofKind: .consumer) }
        var remote = ServiceContext.topLevel
        tracer.extract(producer, into: &remote, using: TraceContextExtractor())
        if continuesProducerTrace { return tracer.startSpan(name, context: remote, ofKind: .consumer) }
        let span = tracer.startSpan(name, context: .topLevel, ofKind: .consumer)
        span.addLink(SpanLink(context: remote, attributes: [:]))
        return span
    }
}
