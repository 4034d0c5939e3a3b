/// The group job's span under `[tracing]`, with swift-distributed-tracing's in-memory
/// tracer: a fan-out of any size links at most `GroupFanOutTracing.maximumLinks` jobs and says
/// how many it left out, while every job still gets its own `create` span and trace context.
import AMQPClient
import APNSTopology
import APNSTopologyNames
import InMemoryTracing
import Testing
import TestSupport
import Tracing

@testable import APNSRegistry

@Suite struct GroupFanOutTracingTests {
    @Test func aGroupJobsSpanLinksAtMostTheCapAndCountsTheRest() async throws {
        let tracer = InMemoryTracer()
        let tracing = GroupFanOutTracing(tracer: tracer)
        let broker = InMemoryBroker()
        try await broker.declareQueue(QueueDeclaration(name: TopologyNames.groups))
        broker.enqueue(TopologyNames.groups, body: Array(#"{"group":"g","payload":{"aps":{}}}"#.utf8))
        let trace = tracing.begin(try #require(try await broker.get(queue: TopologyNames.groups)))
        let jobs = 1_000
        for index in 0..<jobs {
            var message = AMQPOutboundMessage(
                exchange: TopologyNames.jobsExchange, routingKey: "com.example.app", body: Array("\(index)".utf8), properties: AMQPProperties())
            trace.stamp(&message)
        }
        trace.end(.ack)

        let spans = tracer.finishedSpans
        let group = try #require(spans.first { $0.operationName == "process \(TopologyNames.groups)" })
        #expect(group.links.count == GroupFanOutTracing.maximumLinks)
        #expect(group.attributes["apns.links_omitted"]?.toSpanAttribute() == .int64(Int64(jobs - GroupFanOutTracing.maximumLinks)))
        #expect(group.attributes["apns.jobs_stamped"]?.toSpanAttribute() == .int64(Int64(jobs)))
        // Every job keeps its creation span and context, linked or not.
        #expect(spans.filter { $0.operationName == "create \(TopologyNames.jobsExchange)" }.count == jobs)
        #expect(tracer.performedContextInjections.count == jobs)
    }

    @Test func aSmallFanOutIsLinkedWholeWithNothingOmitted() async throws {
        let tracer = InMemoryTracer()
        let broker = InMemoryBroker()
        try await broker.declareQueue(QueueDeclaration(name: TopologyNames.groups))
        broker.enqueue(TopologyNames.groups, body: Array("{}".utf8))
        let trace = GroupFanOutTracing(tracer: tracer).begin(try #require(try await broker.get(queue: TopologyNames.groups)))
        for _ in 0..<3 {
            var message = AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: "b", body: [], properties: AMQPProperties())
            trace.stamp(&message)
        }
        trace.end(.ack)
        let group = try #require(tracer.finishedSpans.first { $0.operationName == "process \(TopologyNames.groups)" })
        #expect(group.links.count == 3)
        #expect(group.attributes["apns.links_omitted"] == nil)
    }
}
