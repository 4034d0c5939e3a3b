/// Broadcast jobs (contract §7): parsing, the request Apple's broadcast API expects, and the
/// outcomes of Apple's channel reasons. Pure: no sockets.
import APNSModel
import APNSOutcome
import Foundation
import Testing

@Suite struct BroadcastJobTests {
    static let bundle = "com.example.app"
    static let channel = "dHN0LXNyY2gtY2hubA=="
    static let fixedID = UUID(uuidString: "00000000-0000-4000-8000-000000000001")!

    static func parse(_ body: String, transport: TransportKind = .http2) -> Result<Job, JobError> {
        JobParser.parse(
            body: Array(body.utf8), bundleID: bundle, messageID: nil, defaultEnvironment: .production,
            transport: transport, makeID: { fixedID })
    }

    static func body(channel: String = channel, payload: String = #"{"aps":{"event":"update","content-state":{}}}"#, _ extra: String = "")
        -> String
    {
        #"{"channel":"\#(channel)","payload":\#(payload)\#(extra.isEmpty ? "" : "," + extra)}"#
    }

    static func failure(_ result: Result<Job, JobError>) -> JobError? {
        if case .failure(let error) = result { return error }
        return nil
    }

    // MARK: parser

    @Test func aBroadcastJobTargetsItsChannelAsLiveActivity() throws {
        let job = try Self.parse(Self.body()).get()
        #expect(job.target == .channel(BroadcastChannel(id: Self.channel)!))
        #expect(job.token == nil)
        #expect(job.pushType == .liveactivity)
        #expect(job.priority == 10)
        #expect(job.topic == Self.bundle)
        #expect(job.notification.target == job.target)
    }

    @Test func explicitLiveActivityPriorityExpirationAndEnvironmentAreKept() throws {
        let job = try Self.parse(Self.body(#""pushType":"liveactivity","priority":5,"expiration":1700000000,"environment":"sandbox""#)).get()
        #expect(job.pushType == .liveactivity)
        #expect(job.priority == 5)
        #expect(job.expiration == 1_700_000_000)
        #expect(job.environment == .sandbox)
    }

    @Test func aTokenJobIsUnchanged() throws {
        let job = try Self.parse(#"{"token":"abcd","payload":{"aps":{"alert":"hi"}}}"#).get()
        #expect(job.target == .device(DeviceToken(hex: "abcd")!))
        #expect(job.topic == Self.bundle)
        #expect(job.pushType == .alert)
    }

    @Test func bothTokenAndChannelIsMalformed() {
        let error = Self.failure(Self.parse(#"{"token":"abcd","channel":"\#(Self.channel)","payload":{"aps":{}}}"#))
        #expect(error?.kind == .malformedJob)
        #expect(error?.field == "channel")
    }

    @Test func neitherTokenNorChannelIsMalformed() {
        let error = Self.failure(Self.parse(#"{"payload":{"aps":{}}}"#))
        #expect(error?.kind == .malformedJob)
        #expect(error?.field == "token")
        #expect(error?.message.contains("channel") == true)
    }

    @Test(arguments: ["alert", "background", "voip", "widgets"])
    func aPushTypeOtherThanLiveActivityIsMalformed(_ pushType: String) {
        let error = Self.failure(Self.parse(Self.body(#""pushType":"\#(pushType)""#)))
        #expect(error?.kind == .malformedJob)
        #expect(error?.field == "pushType")
    }

    @Test func thePayloadLimitIs5120BytesAsSent() throws {
        // `{"aps":{"x":"…"}}` is 16 bytes around the filler.
        let fits = String(repeating: "a", count: 5120 - 16)
        let job = try Self.parse(Self.body(payload: #"{"aps":{"x":"\#(fits)"}}"#)).get()
        #expect(job.payload.count == 5120)
        // Whitespace does not count: it is not sent.
        _ = try Self.parse(Self.body(payload: #"{ "aps" : { "x" : "\#(fits)" } }"#)).get()
        let error = Self.failure(Self.parse(Self.body(payload: #"{"aps":{"x":"\#(fits)a"}}"#)))
        #expect(error?.kind == .payloadTooLarge)
        #expect(error?.message.contains("5120") == true)
    }

    @Test func onTheBinaryTransportABroadcastIsMalformed() {
        let error = Self.failure(Self.parse(Self.body(), transport: .binary))
        #expect(error?.kind == .malformedJob)
        #expect(error?.field == "channel")
        #expect(error?.message.contains("binary") == true)
    }

    @Test func aCollapseIdOnABroadcastIsMalformed() {
        let error = Self.failure(Self.parse(Self.body(#""collapseId":"c1""#)))
        #expect(error?.field == "collapseId")
    }

    @Test(arguments: [
        "", "abc", "ab=c", "abc===", "a\\u0000bc", "ab\\ncd", "ab cd", "ab-_", "abc\u{7f}", String(repeating: "A", count: 260),
    ])
    func aChannelIdThatIsNotBase64IsMalformed(_ id: String) {
        let error = Self.failure(Self.parse(Self.body(channel: id)))
        #expect(error?.kind == .malformedJob)
        #expect(error?.field == "channel")
        // The error line never carries the id itself.
        if id.count > 4 { #expect(error?.message.contains(id) == false) }
    }

    @Test func aChannelThatIsNotAStringIsMalformed() {
        let error = Self.failure(Self.parse(#"{"channel":12,"payload":{"aps":{}}}"#))
        #expect(error?.field == "channel")
    }

    @Test func channelIdsAsAppleIssuesThemAreAccepted() {
        for id in ["dHN0LXNyY2gtY2hubA==", "AAAA", "ab+/cd==", "abcde/+=", String(repeating: "A", count: 256)] {
            #expect(BroadcastChannel(id: id)?.id == id)
        }
    }

    @Test func aChannelIsRedactedInLogs() {
        let channel = BroadcastChannel(id: Self.channel)!
        #expect(!"\(channel)".contains(Self.channel))
        #expect(!PushTarget.channel(channel).redacted.contains(Self.channel))
    }

    // MARK: request

    @Test func aBroadcastIsApplesBroadcastRequest() throws {
        let job = try Self.parse(Self.body(#""expiration":0,"id":"e621e1f8-c36c-495a-93fc-0c247a3e6e5f""#)).get()
        let request = HTTP2Request(notification: job.notification, authority: "api.push.apple.com", authorization: "bearer x.y.z")
        #expect(request.header(":method") == "POST")
        #expect(request.header(":path") == "/4/broadcasts/apps/com.example.app")
        #expect(request.header("apns-channel-id") == Self.channel)
        #expect(request.header("apns-request-id") == "e621e1f8-c36c-495a-93fc-0c247a3e6e5f")
        #expect(request.header("apns-push-type") == "liveactivity")
        #expect(request.header("apns-priority") == "10")
        #expect(request.header("apns-expiration") == "0")
        #expect(request.header("authorization") == "bearer x.y.z")
        // No device token, no topic, no apns-id: the bundle is the path's, the id apns-request-id.
        #expect(request.header("apns-topic") == nil)
        #expect(request.header("apns-id") == nil)
        #expect(!request.headers.contains { $0.value.contains("/3/device") })
        #expect(Set(request.headers.map(\.name)).count == request.headers.count)
        #expect(request.body == job.payload)
    }

    @Test func aBroadcastAnswerNamesItsRequestID() {
        let answer = HTTP2Response.answer(
            status: 200, headers: [.init("apns-request-id", "e621e1f8-c36c-495a-93fc-0c247a3e6e5f")], body: [])
        #expect(answer.apnsID == UUID(uuidString: "e621e1f8-c36c-495a-93fc-0c247a3e6e5f"))
        #expect(HTTP2Response.readsHeader(named: "apns-request-id"))
    }

    // MARK: outcomes

    @Test(arguments: [
        (404, "ChannelNotRegistered"), (400, "BadChannelId"), (400, "MissingChannelId"),
    ])
    func applesChannelReasonsEndTheJobLikeAnInvalidToken(_ status: Int, _ reason: String) {
        let body = Array(#"{"reason":"\#(reason)"}"#.utf8)
        let outcome = OutcomeClassifier.classify(HTTP2Response.answer(status: status, headers: [], body: body))
        #expect(outcome == .invalidToken(reason: reason, timestamp: nil))
    }

    @Test func broadcastProviderFaultsHoldAndTheChannelLimitIsDead() {
        func classify(_ status: Int, _ reason: String) -> Outcome {
            OutcomeClassifier.classify(HTTP2Response.answer(status: status, headers: [], body: Array(#"{"reason":"\#(reason)"}"#.utf8)))
        }
        #expect(classify(400, "FeatureNotEnabled") == .held(reason: "FeatureNotEnabled", status: 400))
        #expect(classify(400, "MissingPushType") == .held(reason: "MissingPushType", status: 400))
        if case .dead(let reason, let status, _) = classify(400, "CannotCreateChannelConfig") {
            #expect(reason == "CannotCreateChannelConfig" && status == 400)
        } else {
            Issue.record("CannotCreateChannelConfig is not dead")
        }
        // Apple's other answers mean for a broadcast what they mean for a device.
        #expect(classify(429, "TooManyRequests") == .retry(reason: "TooManyRequests", status: 429))
        #expect(classify(403, "InvalidProviderToken") == .held(reason: "InvalidProviderToken", status: 403))
    }

    @Test func theChannelReasonsAreDocumentedReasons() {
        for name in ["ChannelNotRegistered", "BadChannelId", "MissingChannelId", "CannotCreateChannelConfig", "FeatureNotEnabled", "MissingPushType"] {
            let reason = APNSReason(rawValue: name)
            #expect(reason.rawValue == name)
            #expect(APNSReason.documented.contains(reason))
        }
    }
}
