import AMQPClient
import APNSModel
import Foundation
import APNSTopology
import Synchronization
import Tracing

/// `[tracing]` in a bundle's pipeline: one span per job, linked to the producer's W3C trace
/// context (`traceparent` on the job, read through `JobEnvelope`), or its child with
/// `parentBased = true` (`ConsumerSpan`), with a child span per stage:
///
///     process <work queue>      (consumer)  messaging.*, apns.bundle, apns.transport, apns.outcome
///       ├─ parse                            apns.job.id, apns.push_type, apns.target.kind, or the reason it is malformed
///       ├─ send                 (client)    apns.id, apns.status, apns.reason (Apple's), apns.transport
///       └─ settle                           apns.outcome, apns.route
///
/// The pipeline calls `begin` for each job and then the `JobTrace` at three points (admitted,
/// answered, settled); with tracing off `begin` is never called: the hot path pays one branch
/// on a nil optional. Child spans are made when their stage is over, with the stage's start
/// time, so a job's trace holds nothing but a few instants while it waits on Apple. A device
/// token never becomes an attribute (only the kind of target).
public struct PipelineTracing: Sendable {
    let tracer: any Tracer
    /// `[tracing] parentBased`: the producer's span is the job span's parent (its sampled flag
    /// honoured) rather than a link of a trace of the worker's own (`ConsumerSpan`).
    let continuesProducerTrace: Bool

    public init(tracer: any Tracer, continuesProducerTrace: Bool = false) {
        self.tracer = tracer
        self.continuesProducerTrace = continuesProducerTrace
    }

    /// Starts the span of one delivered job.
    func begin(_ message: AMQPDeliveredMessage, queue: String, bundleID: String, transport: TransportKind) -> JobTrace {
        let span = ConsumerSpan.start(
            "process \(queue)", tracer: tracer, producer: JobEnvelope(message).traceContext, continuesProducerTrace: continuesProducerTrace)
        span.updateAttributes { attributes in
            attributes["messaging.system"] = "rabbitmq"
            attributes["messaging.operation.type"] = "process"
            attributes["messaging.destination.name"] = SpanAttribute.string(queue)
            if let id = message.properties.messageID { attributes["messaging.message.id"] = SpanAttribute.string(String(id.prefix(64))) }
            attributes["apns.bundle"] = SpanAttribute.string(bundleID)
            attributes["apns.transport"] = SpanAttribute.string(transport.rawValue)
            attributes["apns.redelivered"] = SpanAttribute.bool(message.redelivered)
        }
        return JobTrace(tracer: tracer, span: span, transport: transport)
    }
}

/// The spans of one job on its way through the pipeline (see `PipelineTracing`).
final class JobTrace: Sendable {
    let tracer: any Tracer
    let span: any Span
    let transport: TransportKind
    /// When the stage now running began (ns since the epoch): the next child span's start.
    private let stageStart: Atomic<UInt64>

    init(tracer: any Tracer, span: any Span, transport: TransportKind) {
        self.tracer = tracer
        self.span = span
        self.transport = transport
        self.stageStart = Atomic(DefaultTracerClock.now.nanosecondsSinceEpoch)
    }

    /// Parsing, the delivery limit and the rollout gate decided: the `parse` span.
    func admitted<Broker: MessageBroker>(_ next: BundlePipeline<Broker>.SendOrSettle) {
        endStage("parse", kind: .internal) { span in
            switch next {
            case .send(let job, let context):
                span.updateAttributes { attributes in
                    attributes["apns.job.id"] = SpanAttribute.string(context.jobID ?? job.id.uuidString)
                    attributes["apns.push_type"] = SpanAttribute.string(job.pushType.rawValue)
                    attributes["apns.target.kind"] = job.target.channel == nil ? "device" : "channel"
                    attributes["apns.environment"] = SpanAttribute.string(job.environment.rawValue)
                    attributes["apns.attempt"] = SpanAttribute.int64(Int64(context.previousAttempts + 1))
                }
            case .settleUnsent(let route, _):
                if case .publishThenAck(let message, _) = route, let reason = JobEnvelope(message.properties.headers).reason {
                    span.attributes["apns.reason"] = SpanAttribute.string(reason)
                }
                if route.end == .dead { span.setStatus(SpanStatus(code: .error, message: "dead-lettered unsent")) }
            }
        }
    }

    /// Apple's answer (or the transport's failure): the `send` span.
    func answered(_ result: TransportResult) {
        endStage("send", kind: .client) { span in
            span.updateAttributes { attributes in
                attributes["apns.transport"] = SpanAttribute.string(transport.rawValue)
                switch result {
                case .http(let answer):
                    attributes["apns.status"] = SpanAttribute.int64(Int64(answer.status))
                    if let id = answer.apnsID { attributes["apns.id"] = SpanAttribute.string(id.uuidString) }
                    if let reason = answer.reason { attributes["apns.reason"] = SpanAttribute.string(reason.rawValue) }
                case .binaryAccepted:
                    attributes["apns.status"] = 0
                case .binaryRejected(let status):
                    attributes["apns.status"] = SpanAttribute.int64(Int64(status))
                case .failed(let failure):
                    attributes["apns.reason"] = SpanAttribute.string(failure.name)
                }
            }
            switch result {
            case .http(let answer) where answer.status != 200: span.setStatus(SpanStatus(code: .error, message: answer.reason?.rawValue))
            case .binaryRejected, .failed: span.setStatus(SpanStatus(code: .error))
            default: break
            }
        }
    }

    /// The job reached its end and the broker confirmed what had to be published: the `settle`
    /// span, then the job's own.
    func settled(_ route: OutcomeRouter.Route) {
        let end = route.end
        let now = endStage("settle", kind: .internal) { span in
            span.attributes["apns.outcome"] = SpanAttribute.string(end.label)
            switch route {
            case .publishThenAck(let message, _):
                span.attributes["apns.route"] = SpanAttribute.string("\(message.exchange) \(message.routingKey)")
            case .rejectToDeadLetter:
                span.attributes["apns.route"] = "reject"
            case .ack:
                span.attributes["apns.route"] = "ack"
            }
        }
        span.attributes["apns.outcome"] = SpanAttribute.string(end.label)
        if end == .dead { span.setStatus(SpanStatus(code: .error, message: "dead-lettered")) }
        span.end(at: now)
    }

    /// Makes the child span of the stage that just ended (from its start until now) and starts
    /// the next stage now.
    @discardableResult
    private func endStage(_ name: String, kind: SpanKind, _ describe: (any Span) -> Void) -> DefaultTracerClock.Instant {
        let now = DefaultTracerClock.now
        let start = DefaultTracerClock.Instant(nanosecondsSinceEpoch: stageStart.exchange(now.nanosecondsSinceEpoch, ordering: .relaxed))
        let child = tracer.startSpan(name, context: span.context, ofKind: kind, at: start)
        describe(child)
        child.end(at: now)
        return now
    }
}
