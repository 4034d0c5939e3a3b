import AMQPClient
import APNSCore
import APNSTopology
import Foundation
import Tracing

/// `[tracing]` for group jobs (`apns.groups`): the group job's span continues its producer's W3C
/// trace context, and every section-2 job its fan-out publishes carries the context of a short
/// `create` span of its own (OpenTelemetry's messaging conventions: one creation context per
/// message), to which the group job's span links. The worker's span for that job is a child of
/// its `create` span, so a group job's span leads, link by link, to the job spans of its fan-out.
/// Off (nil), none of this runs.
public struct GroupFanOutTracing: Sendable {
    let tracer: any Tracer

    public init(tracer: any Tracer) {
        self.tracer = tracer
    }

    func begin(_ delivery: AMQPDelivery) -> GroupTrace {
        var parent = ServiceContext.topLevel
        if let producer = JobEnvelope(delivery.message).traceContext {
            tracer.extract(producer, into: &parent, using: TraceContextExtractor())
        }
        let span = tracer.startSpan("process \(TopologyNames.groups)", context: parent, ofKind: .consumer)
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
struct GroupTrace: Sendable {
    let tracer: any Tracer
    let span: any Span

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
        message.properties.headers = envelope.amqpHeaders
        create.end()
        span.addLink(SpanLink(context: create.context, attributes: ["apns.bundle": SpanAttribute.string(message.routingKey)]))
    }

    /// The group job's disposition ends its span.
    func end(_ disposition: RegistryDisposition) {
        switch disposition {
        case .ack:
            span.attributes["apns.outcome"] = "fanned_out"
        case .dead(let error):
            span.attributes["apns.outcome"] = "dead"
            span.attributes["apns.reason"] = SpanAttribute.string(error.reason)
            span.setStatus(SpanStatus(code: .error, message: error.reason))
        case .registryFailed, .requeue:
            span.attributes["apns.outcome"] = "requeued"
            span.setStatus(SpanStatus(code: .error, message: "requeued"))
        }
        span.end()
    }
}
