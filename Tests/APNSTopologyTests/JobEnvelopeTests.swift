import AMQPClient
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing

/// The job-header envelope (contract §4): every number from outside is a count in 0...2^31−1 or
/// absent, and what it writes it reads back.
@Suite struct JobEnvelopeTests {
    static let outOfRange: [AMQPFieldValue] = [
        .int64(Int64.max), .int64(Int64.min), .int64(1 << 31), .int32(-1), .int8(-128), .string("9223372036854775807"),
        .string("2147483648"), .string("-1"), .string("3.0"), .string(" 3"), .string(""), .double(3), .float(3),
        .bool(true), .bytes([0xff]), .void, .table(["x": .int32(1)]), .array([.int32(1)]),
        .string(String(repeating: "0", count: 100_000) + "1"),
    ]

    @Test(arguments: outOfRange)
    func valuesThatAreNoCountCountAsAbsent(value: AMQPFieldValue) {
        let envelope = JobEnvelope([
            JobHeaders.attempt: value, JobHeaders.deliveryCount: value, JobHeaders.status: value, JobHeaders.attempts: value,
        ])
        #expect(envelope.attempt == nil)
        #expect(envelope.previousAttempts == 0)
        #expect(envelope.deliveryCount == nil)
        #expect(envelope.status == nil)
        #expect(envelope.attempts == nil)
    }

    @Test(arguments: [
        (AMQPFieldValue.int64(Int64(Int32.max)), Int(Int32.max)), (.int32(0), 0), (.int16(7), 7), (.int8(3), 3),
        (.string("12"), 12), (.bytes(Array("5".utf8)), 5), (.string("2147483647"), Int(Int32.max)),
    ])
    func countsOfAnyWidthAreRead(value: AMQPFieldValue, expected: Int) {
        #expect(JobEnvelope.count(value) == expected)
        #expect(JobEnvelope([JobHeaders.attempt: value]).previousAttempts == expected)
    }

    @Test func writersClampToTheRangeTheReadersAccept() {
        var envelope = JobEnvelope(nil)
        envelope.setAttempt(Int.max)
        #expect(envelope.headers[JobHeaders.attempt] == .int32(Int32.max))
        #expect(envelope.attempt == Int(Int32.max))
        envelope.setAttempt(-5)
        #expect(envelope.attempt == 0)
        envelope.record(.init(reason: "X", status: Int.min, attempts: Int.max, failedAt: Date(timeIntervalSince1970: 0), error: "a\nb"))
        #expect(envelope.status == 0)
        #expect(envelope.attempts == Int(Int32.max))
        #expect(envelope.error == "a b")
        #expect(envelope.failedAt == Date(timeIntervalSince1970: 0))
        #expect(envelope.reason == "X")
    }

    @Test func aFailureIsReadBackAsWritten() {
        let failedAt = Date(timeIntervalSince1970: 1_700_000_000)
        var envelope = JobEnvelope(["trace": .string("t-1"), JobHeaders.deliveryCount: .int64(4)])
        envelope.forward()
        envelope.record(.init(reason: "RetriesExhausted", status: 500, attempts: 6, failedAt: failedAt, error: "gave up"))
        #expect(envelope.deliveryCount == nil)
        #expect(envelope.reason == "RetriesExhausted")
        #expect(envelope.status == 500)
        #expect(envelope.attempts == 6)
        #expect(envelope.failedAt == failedAt)
        #expect(envelope.error == "gave up")
        #expect(envelope.headers["trace"] == .string("t-1"), "other parties' headers are carried unchanged")
    }

    @Test func aRequeueStartsAfreshAndKeepsTheReason() {
        var envelope = JobEnvelope(["trace": .string("t-1"), JobHeaders.attempt: .int32(2), JobHeaders.deliveryCount: .int64(4)])
        envelope.record(.init(reason: "BadTopic", status: 400, attempts: 3, failedAt: Date(), error: "e"))
        envelope.requeue()
        #expect(envelope.headers == ["trace": .string("t-1"), JobHeaders.lastReason: .string("BadTopic")])
        var bare = JobEnvelope([JobHeaders.deliveryCount: .int64(1)])
        bare.requeue()
        #expect(bare.amqpHeaders == nil)
    }

    @Test func overlongOrForeignDatesAreAbsent() {
        #expect(JobEnvelope([JobHeaders.failedAt: .string(String(repeating: "9", count: 10_000))]).failedAt == nil)
        #expect(JobEnvelope([JobHeaders.failedAt: .int64(5)]).failedAt == nil)
        #expect(JobEnvelope([JobHeaders.failedAt: .string("2023-11-14T22:13:20.5Z")]).failedAt != nil)
    }
}
