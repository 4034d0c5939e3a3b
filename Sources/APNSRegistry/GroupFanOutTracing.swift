import AMQPClient
import APNSModel
import APNSTopology
import APNSTopologyNames
import Foundation
import Synchronization
import Tracing

/// `[tracing]` for group jobs (`apns.groups`): the group job's span links to its producer's W3C
/// trace context (or continues it, `parentBased = true`: `ConsumerSpan`), and every section-2 job
/// its fan-out publishes carries the context of a short `create` span of its own
/// (OpenTelemetry's messaging conventions: one creation context per message), to which the group
/// job's span links, up to `maximumLinks`. The worker's span for that job is a child of its
/// `create` span, so a group job's span leads, link by link, to the job spans of its fan-out.
/// Off (nil), none of this runs.
public struct GroupFanOutTracing: Sendable {
    let tracer: any Tracer
    let continuesProducerTrace: Bool

    /// Links on one group job's span: OpenTelemetry's default span link limit
    /// (`OTEL_SPAN_LINK_COUNT_LIMIT`). A group of 100,000 devices would otherwise hold 100,000
    /// links in memory until its span ends, and export them in one span; the span
    /// says how many were left out (`apns.links_omitted`), and each job span still has its
    /// `create` span, a child of the group job's span, as parent.
    public static let maximumLinks = 128

    public init(tracer: any Tracer, continuesProducerTrace: Bool = false) {
        self.tracer = tracer
        self.continuesProducerTrace = continuesProducerTrace
    }

    func begin(_ delivery: AMQPDelivery) -> GroupTrace {
        let span = ConsumerSpan.start(
            "process \(TopologyNames.groups)", tracer: tracer, producer: JobEnvelope(delivery.message).traceContext,
            continuesProducerTrace: continuesProducerTrace)
        span.updateAttributes { attributes in
            attributes["messaging.system"] = "rabbitmq"
            attributes["messaging.operation.type"] = "process"
            attributes["messaging.destination.name"] = SpanAttribute.string(TopologyNames.groups)
            if let id = delivery.message.properties.messageID { attributes["messaging.message.id"] = SpanAttribute.string(String(id.prefix(64))) }
        }
        return GroupTrace(tracer: tracer, span: span)
    }
}

/// The span of one group job and the creation spans of the jobs it publishes.
final class GroupTrace: Sendable {
    let tracer: any Tracer
    let span: any Span
    /// Jobs stamped so far: the first `maximumLinks` are linked.
    private let stamped = Atomic<Int>(0)

    init(tracer: any Tracer, span: any Span) {
        self.tracer = tracer
        self.span = span
    }

    /// Gives `message` (one job of the fan-out) a creation span of its own, under the group
    /// job's span and linked from it, and puts that span's context on the message.
    func stamp(_ message: inout AMQPOutboundMessage) {
        let create = tracer.startSpan("create \(TopologyNames.jobsExchange)", context: span.context, ofKind: .producer)
        create.updateAttributes { attributes in
            attributes["messaging.system"] = "rabbitmq"
            attributes["messaging.operation.type"] = "create"
            attributes["messaging.destination.name"] = SpanAttribute.string(TopologyNames.jobsExchange)
            attributes["apns.bundle"] = SpanAttribute.string(message.routingKey)
            if let id = message.properties.messageID { attributes["messaging.message.id"] = SpanAttribute.string(id) }
        }
        var envelope = JobEnvelope(message.properties.headers)
        tracer.inject(create.context, into: &envelope, using: JobEnvelopeTraceInjector())
        message.properties.setHeaders(envelope)
        create.end()
        let count = stamped.add(1, ordering: .relaxed).newValue
        guard count <= GroupFanOutTracing.maximumLinks else { return }
        span.addLink(SpanLink(context: create.context, attributes: ["apns.bundle": SpanAttribute.string(message.routingKey)]))
    }

    /// The group job's route ends its span.
    func end(_ route: RegistryRoute) {
        let count = stamped.load(ordering: .relaxed)
        span.attributes["apns.jobs_stamped"] = SpanAttribute.int64(Int64(count))
        if count > GroupFanOutTracing.maximumLinks {
            span.attributes["apns.links_omitted"] = SpanAttribute.int64(Int64(count - GroupFanOutTracing.maximumLinks))
        }
        switch route {
        case .ack:
            span.attributes["apns.outcome"] = "fanned_out"
        case .dead(let error):
            span.attributes["apns.outcome"] = "dead"
            span.attributes["apns.reason"] = SpanAttribute.string(error.reason)
            span.setStatus(SpanStatus(code: .error, message: error.reason))
        case .requeueAndHold, .requeue:
            span.attributes["apns.outcome"] = "requeued"
            span.setStatus(SpanStatus(code: .error, message: "requeued"))
        }
        span.end()
    }
}
