// The pure rules of the operator tools, without a broker: decoding a queued message, filters,
// and the headers of a requeued job.
import AMQPClient
import APNSOperations
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing

private let token = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"

private func deadMessage(id: String = "4F1C9F5E-0C0B-4C65-9A38-6E3B2F0B8C11", reason: String = "BadDeviceToken", failedAt: String = "2026-11-20T10:00:00Z") -> AMQPDeliveredMessage {
    let body = #"{"id":"\#(id)","token":"\#(token)","payload":{"aps":{"alert":"hi"}}}"#
    var properties = AMQPProperties.persistentJSON
    properties.messageID = "other-id"
    properties.headers = [
        JobHeaders.reason: .string(reason), JobHeaders.status: .int32(400), JobHeaders.attempts: .int32(1),
        JobHeaders.failedAt: .string(failedAt), JobHeaders.error: .string("Apple said BadDeviceToken"),
        JobHeaders.attempt: .int32(3), "x-delivery-count": .int64(2), "x-custom": .string("kept"),
        "x-death": .array([.table(["count": .int64(1), "queue": .string("apns.b.retry.10s")])]),
    ]
    return AMQPDeliveredMessage(exchange: "", routingKey: "apns.b.dead", redelivered: false, body: Array(body.utf8), properties: properties)
}

@Suite struct JobInspectionTests {
    @Test func bodiesForPeopleShowTheTokenRedacted() {
        let token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        let shown = JobInspection.redactingToken(#"{"token":"\#(token)","payload":{"aps":{"alert":"<b>hi</b>"}}}"#)
        #expect(!shown.contains(token))
        #expect(shown.contains("0123…cdef") && shown.contains("<b>hi</b>"))
        // Not JSON, or no token: shown as stored.
        #expect(JobInspection.redactingToken("not json") == "not json")
        #expect(JobInspection.redactingToken(#"{"payload":{}}"#) == #"{"payload":{}}"#)
    }

    /// The body is shown as stored with only the token's value cut: key order, spacing, number
    /// lexemes and escapes kept. It was re-serialized through `JSONSerialization` with
    /// `.sortedKeys`, which on Linux sorts keys through ICU: every page view with a dead letter
    /// faulted ICU's data into the worker.
    @Test func theBodyIsShownAsStoredWithOnlyTheTokenCut() {
        let token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        let body = #"{ "zeta": 1.50, "token" : "\#(token)", "Alpha":"é/x", "payload":{"aps":{"alert":"hi"}} }"#
        #expect(JobInspection.redactingToken(body) == #"{ "zeta": 1.50, "token" : "0123…cdef", "Alpha":"é/x", "payload":{"aps":{"alert":"hi"}} }"#)
        // A token that is no device token is cut whole; one not a string leaves the body to the hex-run rule.
        #expect(JobInspection.redactingToken(#"{"token":"xyz","a":1}"#) == #"{"token":"…","a":1}"#)
        #expect(JobInspection.redactingToken(#"{"token":12,"a":"\#(token)"}"#) == #"{"token":12,"a":"0123…cdef"}"#)
        // Duplicate keys, or too deep for the job reader: the hex-run rule still cuts the token.
        #expect(JobInspection.redactingToken(#"{"token":"\#(token)","token":"\#(token)"}"#) == #"{"token":"0123…cdef","token":"0123…cdef"}"#)
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(JobInspection.redactingToken(#"{"token":"\#(token)","d":\#(deep)}"#) == #"{"token":"0123…cdef","d":\#(deep)}"#)
    }

    /// A body the page cannot parse showed its device token in clear.
    @Test func longHexRunsInUnparseableBodiesAreRedacted() {
        let token = String(repeating: "0123456789abcdef", count: 4)
        let id = "4F1C9F5E-0C0B-4C65-9A38-6E3B2F0B8C11"
        let broken = #"{"id":"\#(id)","token":"\#(token)","payload":{"aps":"#
        let shown = JobInspection.redactingToken(broken)
        #expect(!shown.contains(token))
        #expect(shown == #"{"id":"\#(id)","token":"0123…cdef","payload":{"aps":"#)
        // A token in another field, or in upper case, or in plain text.
        #expect(JobInspection.redactingToken("tok=\(token.uppercased());") == "tok=0123…CDEF;")
        #expect(JobInspection.redactingToken(#"{"device":"\#(token)"}"#) == #"{"device":"0123…cdef"}"#)
        // Short runs (UUIDs, numbers) are kept.
        let short = String(repeating: "a", count: JobInspection.redactedHexRunLength - 1)
        #expect(JobInspection.redactingHexRuns("x\(short)y") == "x\(short)y")
    }

    @Test func decodesADeadJob() throws {
        let job = JobInspection.queuedJob(deadMessage(), queue: "apns.b.dead", bundleID: "b", position: 7)
        #expect(job.jobID == "4F1C9F5E-0C0B-4C65-9A38-6E3B2F0B8C11")
        #expect(job.position == 7 && job.queue == "apns.b.dead" && job.bundleID == "b")
        #expect(job.reason == "BadDeviceToken" && job.status == 400 && job.attempts == 1)
        #expect(job.failedAt == Date(timeIntervalSince1970: 1_795_168_800))
        #expect(job.error == "Apple said BadDeviceToken")
        #expect(job.tokenRedacted == "a1b2…8f90")
        #expect(!job.headers.values.contains { $0.contains(token) })
        #expect(job.headers[JobHeaders.status] == "400")
        #expect(job.headers["x-death"] == #"[{"count":1,"queue":"apns.b.retry.10s"}]"#)
        #expect(job.body.contains(token))
    }

    @Test func jobIDFallsBackToMessageIDAndRetryAttemptsAreRead() {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = "from-properties"
        properties.headers = [JobHeaders.attempt: .int32(2)]
        let message = AMQPDeliveredMessage(exchange: "", routingKey: "q", redelivered: false, body: Array("not json".utf8), properties: properties)
        let job = JobInspection.queuedJob(message, queue: "apns.b.retry.10s", bundleID: "b", position: 0)
        #expect(job.jobID == "from-properties" && job.attempts == 2 && job.tokenRedacted == nil && job.body == "not json")
    }

    @Test func filtersByBundleReasonAndAge() {
        let job = JobInspection.queuedJob(deadMessage(), queue: "apns.b.dead", bundleID: "b", position: 0)
        let failed = job.failedAt!
        let now = failed.addingTimeInterval(600)
        #expect(JobInspection.matches(job, JobFilter(), now: now))
        #expect(JobInspection.matches(job, JobFilter(bundleID: "b", reason: "baddevicetoken"), now: now))
        #expect(!JobInspection.matches(job, JobFilter(bundleID: "c"), now: now))
        #expect(!JobInspection.matches(job, JobFilter(reason: "Unregistered"), now: now))
        #expect(JobInspection.matches(job, JobFilter(olderThan: .seconds(300)), now: now))
        #expect(!JobInspection.matches(job, JobFilter(olderThan: .seconds(900)), now: now))
        #expect(JobInspection.matches(job, JobFilter(newerThan: .seconds(900)), now: now))
        #expect(!JobInspection.matches(job, JobFilter(newerThan: .seconds(300)), now: now))
        #expect(JobInspection.selects(.jobIDs(["x", "4F1C9F5E-0C0B-4C65-9A38-6E3B2F0B8C11"]), job, now: now))
        #expect(!JobInspection.selects(.jobIDs(["other-id"]), job, now: now))
        #expect(JobFilter(bundleID: "b").selectsWholeQueues && !JobFilter(reason: "x").selectsWholeQueues)
    }

    @Test func aJobWithoutDatesMatchesNoAgeFilter() {
        let message = AMQPDeliveredMessage(exchange: "", routingKey: "q", redelivered: false, body: [], properties: AMQPProperties())
        let job = JobInspection.queuedJob(message, queue: "q", bundleID: "b", position: 0)
        #expect(!JobInspection.matches(job, JobFilter(olderThan: .seconds(1)), now: Date()))
        #expect(!JobInspection.matches(job, JobFilter(newerThan: .seconds(1)), now: Date()))
    }

    /// A publisher's `x-apns-failed-at` that is not RFC 3339 (forms Foundation's `.iso8601` took,
    /// and garbage): the job is still listed, filtered and requeued, its failure time absent, its
    /// age measured from the publish time, the header shown as sent.
    @Test(arguments: ["2026-11-31T10:00:00Z", "2026-11-20T24:00:00Z", "2026-11-20T10:00:00Zjunk", "2026-11-20T10:00:00GMT+1", "\u{0}", "２０２６-11-20T10:00:00Z"])
    func aForgedFailureTimeIsAbsentAndTheAgeIsThePublishTimes(failedAt: String) {
        var message = deadMessage(failedAt: failedAt)
        let published = Date(timeIntervalSince1970: 1_795_000_000)
        message.properties.timestamp = published
        let job = JobInspection.queuedJob(message, queue: "apns.b.dead", bundleID: "b", position: 0)
        #expect(job.failedAt == nil && job.publishedAt == published && job.referenceDate == published)
        #expect(job.reason == "BadDeviceToken" && job.headers[JobHeaders.failedAt] == failedAt)
        let now = published.addingTimeInterval(600)
        #expect(JobInspection.matches(job, JobFilter(olderThan: .seconds(300)), now: now))
        #expect(!JobInspection.matches(job, JobFilter(olderThan: .seconds(900)), now: now))
        #expect(JobInspection.requeueMessage(message, bundleID: "b").properties.headers?[JobHeaders.failedAt] == nil)
    }

    /// AMQP timestamps in headers (`x-death`'s `time`, anyone's) are rendered by `RFC3339`: the
    /// text `.formatted(.iso8601)` (ICU's) gave, up to year 9999. A forged timestamp past it (an
    /// AMQP timestamp is any 64-bit count of seconds) is shown as 9999-12-31T23:59:59Z, where
    /// Foundation wrote a longer year (and 506713-02-07T00:00:00Z for everything past 10^15 s).
    @Test func timestampHeadersAreRenderedAsISO8601RenderedThem() {
        for seconds in [0, 1_795_769_845, 951_782_400, 4_102_444_799, 253_402_300_799] as [Double] {
            let date = Date(timeIntervalSince1970: seconds)
            #expect(JobInspection.render(.timestamp(date)) == date.formatted(.iso8601))
        }
        let death = AMQPFieldValue.array([.table(["time": .timestamp(Date(timeIntervalSince1970: 1_795_769_845)), "reason": .string("rejected")])])
        #expect(JobInspection.render(death) == #"[{"reason":"rejected","time":"2026-11-27T08:57:25Z"}]"#)
        for seconds in [253_402_300_800, 1e15, Double(UInt64.max)] {
            #expect(JobInspection.render(.timestamp(Date(timeIntervalSince1970: seconds))) == "9999-12-31T23:59:59Z")
        }
    }

    @Test func requeueResetsAttemptsAndKeepsTheReason() {
        let original = deadMessage()
        let out = JobInspection.requeueMessage(original, bundleID: "b")
        #expect(out.exchange == "" && out.routingKey == "apns.b" && out.body == original.body)
        let headers = out.properties.headers ?? [:]
        #expect(headers[JobHeaders.lastReason] == .string("BadDeviceToken"))
        for cleared in JobEnvelope.clearedOnRequeue { #expect(headers[cleared] == nil) }
        #expect(headers["x-custom"] == .string("kept") && headers["x-death"] != nil)
        var expected = original.properties
        expected.headers = headers
        #expect(out.properties == expected)
    }

    @Test func requeueOfARetryJobKeepsAnEarlierLastReason() {
        var properties = AMQPProperties.persistentJSON
        properties.headers = [JobHeaders.attempt: .int32(2), JobHeaders.lastReason: .string("Unregistered")]
        let message = AMQPDeliveredMessage(exchange: "", routingKey: "q", redelivered: false, body: [1], properties: properties)
        let out = JobInspection.requeueMessage(message, bundleID: "b")
        #expect(out.properties.headers == [JobHeaders.lastReason: .string("Unregistered")])
        let bare = AMQPDeliveredMessage(exchange: "", routingKey: "q", redelivered: false, body: [1], properties: AMQPProperties(headers: [JobHeaders.attempt: .int32(1)]))
        #expect(JobInspection.requeueMessage(bare, bundleID: "b").properties.headers == nil)
    }

    @Test func retryKindCoversEveryDistinctDelay() {
        #expect(JobInspection.queues(.retry, bundleID: "b", retryDelays: [.seconds(10), .seconds(60), .seconds(60)]) == ["apns.b.retry.10s", "apns.b.retry.1m"])
        #expect(JobInspection.queues(.dead, bundleID: "b", retryDelays: [.seconds(10)]) == ["apns.b.dead"])
    }
}
