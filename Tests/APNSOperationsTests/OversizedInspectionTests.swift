// How the operator tools name a message the broker dead-lettered because the worker rejected it
// unread (over the size limit): it carries no x-apns-* header, only RabbitMQ's x-death.
import AMQPClient
import APNSOperations
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing

@Suite struct OversizedInspectionTests {
    static let diedAt = Date(timeIntervalSince1970: 1_790_000_000)

    static func brokerDeadLetter(reason: String = "rejected", extra: AMQPTable = [:]) -> AMQPDeliveredMessage {
        var properties = AMQPProperties.persistentJSON
        var headers: AMQPTable = [
            "x-death": .array([
                .table([
                    "count": .int64(1), "reason": .string(reason), "queue": .string("apns.b"), "time": .timestamp(diedAt),
                    "exchange": .string("apns.jobs"), "routing-keys": .array([.string("b")]),
                ]),
                .table(["count": .int64(2), "reason": .string("expired"), "queue": .string("apns.b.retry.10s")]),
            ]),
            "x-first-death-reason": .string(reason), "x-custom": .string("kept"),
        ]
        headers.merge(extra) { $1 }
        properties.headers = headers
        return AMQPDeliveredMessage(
            exchange: "", routingKey: "apns.b.dead", redelivered: false, body: [UInt8](repeating: 0x20, count: 70_000), properties: properties)
    }

    @Test func aRejectedMessageIsNamedMessageTooLarge() {
        let job = JobInspection.queuedJob(Self.brokerDeadLetter(), queue: "apns.b.dead", bundleID: "b", position: 0)
        #expect(job.reason == "MessageTooLarge")
        #expect(job.failedAt == Self.diedAt)
        #expect(job.error?.contains("rejected unread") == true && job.error?.contains("apns.b") == true)
        #expect(JobInspection.matches(job, JobFilter(reason: "messagetoolarge"), now: Date()))
        #expect(!JobInspection.matches(job, JobFilter(reason: "MalformedJob"), now: Date()))
    }

    /// Only the broker's most recent dead-lettering counts, and only a rejection: the expiries a
    /// job went through in retry queues name nothing, and the worker's own headers always win.
    @Test func onlyTheLatestRejectionWithoutWorkerHeadersIsNamed() {
        let expired = JobInspection.queuedJob(Self.brokerDeadLetter(reason: "expired"), queue: "apns.b.dead", bundleID: "b", position: 0)
        #expect(expired.reason == nil && expired.error == nil)
        let workerDead = JobInspection.queuedJob(
            Self.brokerDeadLetter(extra: [JobHeaders.reason: .string("BadDeviceToken"), JobHeaders.error: .string("Apple said so")]),
            queue: "apns.b.dead", bundleID: "b", position: 0)
        #expect(workerDead.reason == "BadDeviceToken" && workerDead.error == "Apple said so")
        // RabbitMQ 3.13 and later also write x-last-death-*; without x-death they still name it.
        var properties = AMQPProperties.persistentJSON
        properties.headers = ["x-last-death-reason": .string("rejected"), "x-last-death-queue": .string("apns.b")]
        let lastOnly = AMQPDeliveredMessage(exchange: "", routingKey: "apns.b.dead", redelivered: false, body: [], properties: properties)
        #expect(JobEnvelope(lastOnly).failureReason == "MessageTooLarge")
        // Forged nonsense names nothing and breaks nothing.
        properties.headers = ["x-death": .array([.string("forged"), .void]), "x-last-death-reason": .int64(1)]
        let forged = AMQPDeliveredMessage(exchange: "", routingKey: "apns.b.dead", redelivered: false, body: [], properties: properties)
        #expect(JobEnvelope(forged).failureReason == nil)
    }

    /// A requeue sends it back body unchanged, remembering why it was dead.
    @Test func aRequeueKeepsTheReasonAndTheBody() {
        let message = Self.brokerDeadLetter()
        let out = JobInspection.requeueMessage(message, bundleID: "b")
        #expect(out.routingKey == "apns.b" && out.body == message.body)
        #expect(out.properties.headers?[JobHeaders.lastReason] == .string("MessageTooLarge"))
        #expect(out.properties.headers?["x-custom"] == .string("kept"))
    }
}
