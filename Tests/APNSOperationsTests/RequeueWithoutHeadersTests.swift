/// A dead job whose header table the worker dropped for size (contract §4: properties over
/// 16 KiB, or nested too deep) goes back to work without the headers it arrived with; requeuing
/// it says so, in the report, the CLI and the log.
import AMQPClient
import APNSModel
import APNSTopologyNames
import APNSOperations
import APNSTopology
import Foundation
import Testing
import TestSupport

@Suite struct RequeueWithoutHeadersTests {
    /// A dead letter as the worker writes it for `error`: x-apns-* headers alone.
    static func deadLetter(id: String, reason: String = JobError.Kind.malformedJob.rawValue, error: JobError) -> AMQPOutboundMessage {
        var message = deadJob(id: id, to: QueueInspectorSeamTests.dead, reason: reason, failedAt: Date())
        message.properties.headers?[JobHeaders.error] = .string(error.description)
        return message
    }

    static func delivered(_ message: AMQPOutboundMessage) -> AMQPDeliveredMessage {
        AMQPDeliveredMessage(exchange: "", routingKey: message.routingKey, redelivered: false, body: message.body, properties: message.properties)
    }

    @Test func theDeadLettersOfDroppedHeadersAreRecognised() {
        let oversized = JobError.oversizedProperties(20_000, limit: AMQPProperties.maximumEncodedSize)
        let nested = JobError.nestedHeaders(limit: AMQPProperties.maximumHeaderDepth)
        #expect(JobInspection.headersWereDropped(Self.delivered(Self.deadLetter(id: "a", error: oversized))))
        #expect(JobInspection.headersWereDropped(Self.delivered(Self.deadLetter(id: "b", error: nested))))
        // Another malformed job, and the same text under another reason, kept their headers.
        let other = JobError(kind: .malformedJob, field: "token", message: "not hex")
        #expect(!JobInspection.headersWereDropped(Self.delivered(Self.deadLetter(id: "c", error: other))))
        #expect(!JobInspection.headersWereDropped(Self.delivered(Self.deadLetter(id: "d", reason: "BadDeviceToken", error: oversized))))
    }

    @Test func requeuingThemNamesThemInTheReport() async throws {
        let (broker, inspector) = try await QueueInspectorSeamTests.make()
        let oversized = JobError.oversizedProperties(20_000, limit: AMQPProperties.maximumEncodedSize)
        for message in [
            Self.deadLetter(id: "job-00000", error: oversized),
            deadJob(id: "job-00001", to: QueueInspectorSeamTests.dead, reason: "BadDeviceToken", failedAt: Date()),
        ] {
            broker.enqueue(QueueInspectorSeamTests.dead, body: message.body, properties: message.properties)
        }
        let report = try await inspector.requeue(.dead, .all(JobFilter()))
        #expect(report == MoveReport(moved: 2, notFound: [], withoutTheirHeaders: ["job-00000"]))
        #expect(broker.ready(QueueInspectorSeamTests.work)?.count == 2)
    }
}
