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

    /// Moments around now, the epoch, leap days, and fractions that round down (before 1970 too).
    static let failureMoments: [Double] = [
        0, 1_700_000_000, 1_795_769_845.999_9, 1_800_000_000.7, -0.5, -86_400.25, 951_782_400, 4_102_444_799.5, 1_709_164_800,
    ]

    /// `x-apns-failed-at` is written by `RFC3339` now: the bytes `.formatted(.iso8601)` wrote
    /// (Foundation's, ICU's on Linux, is the oracle here), read back to the second.
    @Test(arguments: failureMoments)
    func theFailureTimeIsWrittenAsISO8601WroteIt(seconds: Double) {
        let failedAt = Date(timeIntervalSince1970: seconds)
        var envelope = JobEnvelope(nil)
        envelope.record(.init(reason: "X", status: 0, attempts: 1, failedAt: failedAt, error: "e"))
        #expect(envelope.headers[JobHeaders.failedAt] == .string(failedAt.formatted(.iso8601)))
        #expect(envelope.failedAt == Date(timeIntervalSinceReferenceDate: failedAt.timeIntervalSinceReferenceDate.rounded(.down)))
    }

    /// RFC 3339 as another writer may send it: a fraction, an offset, bytes instead of a string.
    @Test(arguments: [
        (AMQPFieldValue.string("2023-11-14T22:13:20.5Z"), 1_700_000_000.5), (.string("2023-11-14T23:43:20+01:30"), 1_700_000_000),
        (.string("2023-11-14T22:13:20.123456789-00:00"), 1_700_000_000.123_456_789), (.bytes(Array("2023-11-14T22:13:20Z".utf8)), 1_700_000_000),
    ])
    func rfc3339FromOtherWritersIsRead(value: AMQPFieldValue, seconds: Double) throws {
        let failedAt = try #require(JobEnvelope([JobHeaders.failedAt: value]).failedAt)
        #expect(abs(failedAt.timeIntervalSince1970 - seconds) < 1e-6)
    }

    /// Anyone with publish rights sets `x-apns-failed-at`. What is not an RFC 3339 date-time
    /// counts as absent: the forms Foundation's `.iso8601` parser took and `RFC3339` refuses (a
    /// day rolled over, 24:00, minute 60, offsets without a colon or minutes, a time zone's name,
    /// text after the date, one-digit fields, five-digit years), and garbage of every kind.
    @Test(arguments: [
        "2024-02-30T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:60:00Z", "2024-01-01T00:00:00+0100", "2024-01-01T00:00:00+01",
        "2024-01-01T00:00:00GMT+1", "2024-01-01T00:00:00UTC", "2024-01-01T00:00:00Zjunk", "2024-01-01T00:00:00.5Zjunk", "2024-1-1T1:2:3Z",
        "10000-01-01T00:00:00Z", "99999-01-01T00:00:00Z", "2024-01-01T00:00:00+19:00", "2024-01-01T00:00:00.1234567891Z",
        "", "now", "2024-01-01", "2024-01-01T00:00:00", "２０２４-01-01T00:00:00Z", "2024-01-01T00:00:00\u{0}Z", "\u{FEFF}2024-01-01T00:00:00Z",
        "2024-01-01T00:00:00Z" + String(repeating: " ", count: 16), String(repeating: "9", count: 36), String(repeating: "2024-01-01T00:00:00Z", count: 5_000),
    ])
    func aFailedAtThatIsNotRFC3339IsAbsent(text: String) {
        for value in [AMQPFieldValue.string(text), .bytes(Array(text.utf8))] {
            let envelope = JobEnvelope([JobHeaders.failedAt: value, JobHeaders.reason: .string("BadDeviceToken")])
            #expect(envelope.failedAt == nil, "\(text.prefix(40))")
            #expect(envelope.failureTime == nil)
            #expect(envelope.failureReason == "BadDeviceToken", "the rest of the failure is still read")
            #expect(envelope.headers[JobHeaders.failedAt] == value, "and the header is carried unchanged")
        }
    }

    @Test func overlongOrForeignDatesAreAbsent() {
        #expect(JobEnvelope([JobHeaders.failedAt: .string(String(repeating: "9", count: 10_000))]).failedAt == nil)
        #expect(JobEnvelope([JobHeaders.failedAt: .int64(5)]).failedAt == nil)
        #expect(JobEnvelope([JobHeaders.failedAt: .timestamp(Date(timeIntervalSince1970: 5))]).failedAt == nil)
        #expect(JobEnvelope([JobHeaders.failedAt: .bytes([0xff, 0xfe] + Array("2023-11-14T22:13:20Z".utf8))]).failedAt == nil)
        #expect(JobEnvelope([JobHeaders.failedAt: .string("2023-11-14T22:13:20.5Z")]).failedAt != nil)
    }
}
