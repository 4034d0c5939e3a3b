import APNSJSON
import APNSModel
import APNSRegistryMessages
import Foundation
import Testing

/// The job contract (contract §2): good bodies, bad bodies, defaults, topics, ids, limits.
@Suite struct JobParserTests {
    static let bundle = "com.omnigroup.OmniFocus2.iPad"
    static let token64 = String(repeating: "0a", count: 32)
    static let fixedID = UUID(uuidString: "00000000-0000-4000-8000-000000000001")!

    static func parse(
        _ body: String, transport: TransportKind = .http2, messageID: String? = nil,
        defaultEnvironment: APNSEnvironment = .production
    ) -> Result<Job, JobError> {
        parse(bytes: Array(body.utf8), transport: transport, messageID: messageID, defaultEnvironment: defaultEnvironment)
    }

    static func parse(
        bytes: [UInt8], transport: TransportKind = .http2, messageID: String? = nil,
        defaultEnvironment: APNSEnvironment = .production
    ) -> Result<Job, JobError> {
        JobParser.parse(
            body: bytes, bundleID: bundle, messageID: messageID, defaultEnvironment: defaultEnvironment,
            transport: transport, makeID: { fixedID })
    }

    /// A body with the standard token and the given payload and extra fields (JSON text).
    static func body(payload: String = #"{"aps":{"alert":"hi"}}"#, token: String = token64, _ extra: String = "") -> String {
        #"{"token":"\#(token)","payload":\#(payload)\#(extra.isEmpty ? "" : "," + extra)}"#
    }

    // MARK: good bodies

    struct Good: Sendable, CustomTestStringConvertible {
        var name: String
        var body: String
        var transport: TransportKind = .http2
        var pushType: PushType = .alert
        var priority: Int = 10
        var expiration: Int? = nil
        var collapseID: String? = nil
        var environment: APNSEnvironment = .production
        var payload: String = #"{"aps":{"alert":"hi"}}"#
        var testDescription: String { name }
    }

    static let goodBodies: [Good] = [
        Good(name: "minimal alert", body: body()),
        Good(name: "silent push defaults to background, priority 5",
             body: body(payload: #"{"aps":{"content-available":1}}"#),
             pushType: .background, priority: 5, payload: #"{"aps":{"content-available":1}}"#),
        Good(name: "content-available with sound stays alert",
             body: body(payload: #"{"aps":{"content-available":1,"sound":"x"}}"#),
             payload: #"{"aps":{"content-available":1,"sound":"x"}}"#),
        Good(name: "content-available with badge stays alert",
             body: body(payload: #"{"aps":{"content-available":1,"badge":3}}"#),
             payload: #"{"aps":{"content-available":1,"badge":3}}"#),
        Good(name: "content-available 0 is alert",
             body: body(payload: #"{"aps":{"content-available":0}}"#),
             payload: #"{"aps":{"content-available":0}}"#),
        Good(name: "explicit background with explicit priority 10",
             body: body(payload: #"{"aps":{"content-available":1}}"#, #""pushType":"background","priority":10"#),
             pushType: .background, priority: 10, payload: #"{"aps":{"content-available":1}}"#),
        Good(name: "explicit background without priority gets 5",
             body: body(#""pushType":"background""#), pushType: .background, priority: 5),
        Good(name: "voip", body: body(#""pushType":"voip""#), pushType: .voip),
        Good(name: "priority 1", body: body(#""priority":1"#), priority: 1),
        Good(name: "priority 5", body: body(#""priority":5"#), priority: 5),
        Good(name: "expiration 0 = deliver once", body: body(#""expiration":0"#), expiration: 0),
        Good(name: "expiration in seconds", body: body(#""expiration":1700000000"#), expiration: 1_700_000_000),
        Good(name: "collapseId of 64 bytes",
             body: body(#""collapseId":"\#(String(repeating: "c", count: 64))""#),
             collapseID: String(repeating: "c", count: 64)),
        Good(name: "empty collapseId is none", body: body(#""collapseId":"""#)),
        Good(name: "collapseId with spaces and non-ASCII letters", body: body(#""collapseId":"a b é\u0080""#), collapseID: "a b é\u{80}"),
        Good(name: "environment sandbox overrides the default", body: body(#""environment":"sandbox""#), environment: .sandbox),
        Good(name: "environment production", body: body(#""environment":"production""#)),
        Good(name: "unknown fields are ignored",
             body: body(#""futureField":{"a":[1,2,3]},"another":null"#)),
        Good(name: "null optional fields are absent",
             body: body(#""pushType":null,"priority":null,"expiration":null,"collapseId":null,"id":null,"environment":null,"userInfo":null"#)),
        Good(name: "whitespace around tokens is removed from the payload, order and lexemes kept",
             body: "{ \"token\" : \"\(token64)\" ,\n \"payload\" : {\n  \"z\" : 1.50 ,\n  \"aps\" : { \"alert\" : \"a b\\u00e9\" } \n} }",
             payload: #"{"z":1.50,"aps":{"alert":"a b\u00e9"}}"#),
        Good(name: "spaces and escaped quotes inside strings are kept",
             body: body(payload: #"{ "aps" : { "alert" : "say \"hi  there\" \\ ok" } }"#),
             payload: #"{"aps":{"alert":"say \"hi  there\" \\ ok"}}"#),
        Good(name: "binary transport with 32-byte token, priority 5",
             body: body(#""priority":5,"expiration":4294967295"#), transport: .binary,
             priority: 5, expiration: 4_294_967_295),
    ]

    @Test(arguments: goodBodies)
    func acceptsGoodBody(_ good: Good) throws {
        let job = try Self.parse(good.body, transport: good.transport).get()
        #expect(job.pushType == good.pushType)
        #expect(job.priority == good.priority)
        #expect(job.expiration == good.expiration)
        #expect(job.collapseID == good.collapseID)
        #expect(job.environment == good.environment)
        #expect(String(decoding: job.payload, as: UTF8.self) == good.payload)
        #expect(job.token?.bytes == [UInt8](repeating: 0x0a, count: 32))
        #expect(job.bundleID == Self.bundle)
        #expect(job.id == Self.fixedID)
    }

    @Test func tokenHexIsCaseInsensitiveAndOfAnyLengthOnHTTP2() throws {
        let upper = try Self.parse(Self.body(token: "DEADBEEF")).get()
        let lower = try Self.parse(Self.body(token: "deadbeef")).get()
        #expect(upper.token?.bytes == [0xde, 0xad, 0xbe, 0xef])
        #expect(upper.token == lower.token)
        let long = try Self.parse(Self.body(token: String(repeating: "Ab", count: 100))).get()
        #expect(long.token?.bytes.count == 100)
    }

    @Test func userInfoIsKeptAndNotSent() throws {
        let job = try Self.parse(Self.body(#""userInfo":{"syncServer":"sync1.example.com","n":3,"deep":{"a":[true,null]}}"#)).get()
        #expect(job.userInfo["syncServer"] == .string("sync1.example.com"))
        #expect(job.userInfo["n"] == .integer(3))
        #expect(job.userInfo["deep"]?["a"] == .array([.bool(true), .null]))
        #expect(!String(decoding: job.payload, as: UTF8.self).contains("syncServer"))
    }

    @Test func userInfoStringsAreDecoded() throws {
        let job = try Self.parse(Self.body(#""userInfo":{"s":"q\"b\\s\/\u00e9\ud83d\ude00\n\t"}"#)).get()
        #expect(job.userInfo["s"] == .string("q\"b\\s/é😀\n\t"))
    }

    @Test func jsonValueAccessors() throws {
        let job = try Self.parse(Self.body(#""userInfo":{"s":"x","i":7,"d":1.5,"b":false,"a":[],"o":{},"n":null}"#)).get()
        let info = JSONValue.object(job.userInfo)
        #expect(info["s"]?.stringValue == "x")
        #expect(info["i"]?.integerValue == 7)
        #expect(info["s"]?.integerValue == nil)
        #expect(info["i"]?.stringValue == nil)
        #expect(info["missing"] == nil)
        #expect(JSONValue.string("x")["key"] == nil)
        let names = ["s", "i", "d", "b", "a", "o", "n"].map { info[$0]?.typeName ?? "" }
        #expect(names == ["a string", "an integer", "a number", "a boolean", "an array", "an object", "null"])
    }

    @Test func jsonValueParsesAnyText() throws {
        #expect(try JSONValue(parsing: Array(#" [1, "a", {"k": null}] "#.utf8))
            == .array([.integer(1), .string("a"), .object(["k": .null])]))
        #expect(try JSONValue(parsing: Array("true".utf8)) == .bool(true))
        #expect(throws: JSONSyntaxError(offset: 1, message: "not valid UTF-8")) {
            try JSONValue(parsing: [0x22, 0xFF, 0x22])
        }
        #expect(throws: JSONSyntaxError(offset: 2, message: "nesting deeper than 2 levels")) {
            try JSONValue(parsing: Array("[[[]]]".utf8), maxDepth: 2)
        }
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: Array("1 2".utf8)) }
        #expect(throws: JSONSyntaxError.self) { try JSONValue(parsing: []) }
    }

    /// Strings are scanned eight bytes at a time: put the special byte at every word position.
    @Test(arguments: 0..<20)
    func specialBytesAnywhereInALongString(_ position: Int) throws {
        let before = String(repeating: "a", count: position)
        let after = String(repeating: "b", count: 19 - position)
        let escaped = try Self.parse(Self.body(#""userInfo":{"s":"\#(before)\"é\\\#(after)"}"#)).get()
        #expect(escaped.userInfo["s"] == .string(before + "\"é\\" + after))
        let plain = try Self.parse(Self.body(#""userInfo":{"s":"\#(before)ü\#(after)"}"#)).get()
        #expect(plain.userInfo["s"] == .string(before + "ü" + after))
        guard case .failure(let error) = Self.parse(Self.body(#""userInfo":{"s":"\#(before)\#u{1F}\#(after)"}"#)) else {
            Issue.record("control character at \(position) accepted")
            return
        }
        #expect(error.message.contains("control character"))
    }

    @Test func compactPayloadIsCopiedAsIs() throws {
        let payload = #"{"aps":{"alert":"a  b"},"k":[1,2.50,"x"]}"#
        let job = try Self.parse(Self.body(payload: payload)).get()
        #expect(job.payload == Array(payload.utf8))
    }

    @Test func numbersKeepIntegersExact() throws {
        let job = try Self.parse(Self.body(
            #""userInfo":{"big":9223372036854775807,"huge":9223372036854775808,"neg":-12,"f":-0.5e2,"z":0}"#)).get()
        #expect(job.userInfo["big"] == .integer(Int64.max))
        #expect(job.userInfo["huge"] == .number(9_223_372_036_854_775_808.0))
        #expect(job.userInfo["neg"] == .integer(-12))
        #expect(job.userInfo["f"] == .number(-50))
        #expect(job.userInfo["z"] == .integer(0))
    }

    // MARK: topics

    static let topicSuffixes: [(PushType, String)] = [
        (.alert, ""), (.background, ""), (.mdm, ""),
        (.voip, ".voip"), (.complication, ".complication"), (.fileprovider, ".pushkit.fileprovider"),
        (.liveactivity, ".push-type.liveactivity"), (.location, ".location-query"), (.pushtotalk, ".voip-ptt"),
        (.widgets, ".push-type.widgets"), (.controls, ".push-type.controls"),
    ]

    @Test func everyPushTypeHasATopicRow() {
        #expect(Set(Self.topicSuffixes.map(\.0)) == Set(PushType.allCases))
    }

    @Test(arguments: topicSuffixes)
    func topicCarriesApplesSuffix(_ pushType: PushType, _ suffix: String) throws {
        let job = try Self.parse(Self.body(#""pushType":"\#(pushType.rawValue)""#)).get()
        #expect(job.pushType == pushType)
        #expect(job.topic == Self.bundle + suffix)
        let notification = job.notification
        #expect(notification.topic == Self.bundle + suffix)
        #expect(notification.pushType == pushType)
    }

    @Test func notificationCarriesEveryField() throws {
        let id = "6f1d2c1e-6b1a-4e8c-9d6f-0123456789ab"
        let job = try Self.parse(Self.body(
            #""pushType":"voip","priority":5,"expiration":12,"collapseId":"c1","id":"\#(id)","environment":"sandbox""#)).get()
        let n = job.notification
        #expect(n.id == UUID(uuidString: id))
        #expect(n.token == job.token)
        #expect(n.topic == Self.bundle + ".voip")
        #expect(n.priority == 5)
        #expect(n.expiration == 12)
        #expect(n.collapseID == "c1")
        #expect(n.payload == Array(#"{"aps":{"alert":"hi"}}"#.utf8))
        #expect(n.environment == .sandbox)
    }

    // MARK: ids

    @Test func idFromBodyWinsInEitherCase() throws {
        let lower = "6f1d2c1e-6b1a-4e8c-9d6f-0123456789ab"
        let job = try Self.parse(Self.body(#""id":"\#(lower)""#), messageID: "11111111-1111-1111-1111-111111111111").get()
        #expect(job.id == UUID(uuidString: lower))
        let upper = try Self.parse(Self.body(#""id":"\#(lower.uppercased())""#)).get()
        #expect(upper.id == UUID(uuidString: lower))
    }

    @Test func idFromMessageIDWhenItIsAUUID() throws {
        let messageID = "11111111-2222-4333-8444-555555555555"
        let job = try Self.parse(Self.body(), messageID: messageID).get()
        #expect(job.id == UUID(uuidString: messageID))
    }

    @Test(arguments: [nil, "job-42", "", "{11111111-2222-4333-8444-555555555555}", "111111112222433384445555555555555"])
    func newIDWhenMessageIDIsNotAUUID(_ messageID: String?) throws {
        var generated: [UUID] = []
        let next = UUID(uuidString: "99999999-9999-4999-8999-999999999999")!
        let job = try JobParser.parse(
            body: Array(Self.body().utf8), bundleID: Self.bundle, messageID: messageID,
            defaultEnvironment: .production, transport: .http2,
            makeID: { generated.append(next); return next }).get()
        #expect(job.id == next)
        #expect(generated.count == 1)
    }

    /// Contract §8: the job's `events` wins over its bundle's; absent (or null), the bundle decides.
    @Test func eventsLevelIsReadAndAbsentMeansTheBundles() throws {
        for level in DeliveryEventLevel.allCases {
            #expect(try Self.parse(Self.body(#""events":"\#(level.rawValue)""#)).get().events == level)
        }
        #expect(try Self.parse(Self.body()).get().events == nil)
        #expect(try Self.parse(Self.body(#""events":null"#)).get().events == nil)
    }

    @Test func defaultEnvironmentApplies() throws {
        let job = try Self.parse(Self.body(), defaultEnvironment: .sandbox).get()
        #expect(job.environment == .sandbox)
        let overridden = try Self.parse(Self.body(#""environment":"production""#), defaultEnvironment: .sandbox).get()
        #expect(overridden.environment == .production)
    }

    // MARK: bad bodies

    struct Bad: Sendable, CustomTestStringConvertible {
        var name: String
        var body: [UInt8]
        var transport: TransportKind = .http2
        var field: String
        var kind: JobError.Kind = .malformedJob
        /// A fragment the one-line message must contain.
        var mentions: String

        init(_ name: String, _ body: String, transport: TransportKind = .http2, field: String,
             kind: JobError.Kind = .malformedJob, mentions: String) {
            self.init(name, bytes: Array(body.utf8), transport: transport, field: field, kind: kind, mentions: mentions)
        }

        init(_ name: String, bytes: [UInt8], transport: TransportKind = .http2, field: String,
             kind: JobError.Kind = .malformedJob, mentions: String) {
            self.name = name
            self.body = bytes
            self.transport = transport
            self.field = field
            self.kind = kind
            self.mentions = mentions
        }

        var testDescription: String { name }
    }

    static let badBodies: [Bad] = [
        Bad("not JSON", "hello", field: "body", mentions: "invalid JSON at byte 0"),
        Bad("empty body", "", field: "body", mentions: "empty"),
        Bad("whitespace only", "  \n", field: "body", mentions: "empty"),
        Bad("top level is an array", "[]", field: "body", mentions: "must be a JSON object"),
        Bad("top level is a string", #""x""#, field: "body", mentions: "must be a JSON object"),
        Bad("trailing data", body() + "x", field: "body", mentions: "after the top-level object"),
        Bad("two objects", body() + body(), field: "body", mentions: "after the top-level object"),
        Bad("unterminated object", #"{"token":"ab""#, field: "body", mentions: "unexpected end"),
        Bad("trailing comma", #"{"token":"ab",}"#, field: "body", mentions: "expected a string key"),
        Bad("single quotes", #"{'token':'ab'}"#, field: "body", mentions: "expected a string key"),
        Bad("leading zero", body(#""priority":010"#), field: "body", mentions: "expected ','"),
        Bad("bare minus", body(#""priority":-"#), field: "body", mentions: "invalid number"),
        Bad("NaN literal", body(#""priority":NaN"#), field: "body", mentions: "unexpected character"),
        Bad("truncated literal", #"{"a":tru}"#, field: "body", mentions: "invalid literal"),
        Bad("invalid escape", body(#""userInfo":{"s":"\x"}"#), field: "body", mentions: "invalid escape"),
        Bad("lone high surrogate", body(#""userInfo":{"s":"\ud800"}"#), field: "body", mentions: "surrogate"),
        Bad("lone low surrogate", body(#""userInfo":{"s":"\udc00x"}"#), field: "body", mentions: "surrogate"),
        Bad("raw newline in a string", "{\"token\":\"a\nb\"}", field: "body", mentions: "control character"),
        Bad("number out of range", body(#""userInfo":{"n":1e999}"#), field: "body", mentions: "out of range"),
        Bad("duplicate top-level key", #"{"token":"ab","token":"cd","payload":{"aps":{}}}"#, field: "body", mentions: "duplicate key \"token\""),
        Bad("duplicate key in payload", body(payload: #"{"aps":{},"aps":{"alert":"x"}}"#), field: "body", mentions: "duplicate key \"aps\""),
        Bad("a duplicate key's control characters are not echoed", #"{"a\fb\u2028":1,"a\fb\u2028":2}"#, field: "body", mentions: "duplicate key \"a?b?\""),
        Bad("nor in the payload", body(payload: #"{"aps":{},"x\u0085":1,"x\u0085":2}"#), field: "body", mentions: "duplicate key \"x?\""),
        Bad("invalid UTF-8 byte", bytes: Array(#"{"token":""#.utf8) + [0xFF] + Array(#""}"#.utf8), field: "body", mentions: "not valid UTF-8 (byte 10)"),
        Bad("overlong UTF-8", bytes: Array(#"{"a":""#.utf8) + [0xC0, 0xAF] + Array(#""}"#.utf8), field: "body", mentions: "not valid UTF-8 (byte 6)"),
        Bad("UTF-8 surrogate", bytes: Array(#"{"a":""#.utf8) + [0xED, 0xA0, 0x80] + Array(#""}"#.utf8), field: "body", mentions: "not valid UTF-8"),
        Bad("truncated UTF-8 sequence", bytes: Array(#"{"a":"x"#.utf8) + [0xE2, 0x82], field: "body", mentions: "not valid UTF-8"),
        Bad("Latin-1 body", bytes: Array(#"{"a":""#.utf8) + [0xE9] + Array(#""}"#.utf8), field: "body", mentions: "not valid UTF-8"),

        Bad("missing token", #"{"payload":{"aps":{}}}"#, field: "token", mentions: "is required"),
        Bad("null token", #"{"token":null,"payload":{"aps":{}}}"#, field: "token", mentions: "is required"),
        Bad("token is a number", #"{"token":12,"payload":{"aps":{}}}"#, field: "token", mentions: "got an integer"),
        Bad("token is empty", body(token: ""), field: "token", mentions: "is empty"),
        Bad("token has a non-hex digit", body(token: "abcg"), field: "token", mentions: "non-hex character at position 3"),
        Bad("token has spaces", body(token: "ab cd"), field: "token", mentions: "position 2"),
        Bad("token has an odd length", body(token: "abc"), field: "token", mentions: "odd number of hex digits"),
        Bad("binary token of 31 bytes", body(token: String(repeating: "ab", count: 31)), transport: .binary, field: "token", mentions: "32 bytes"),
        Bad("token of 101 bytes", body(token: String(repeating: "ab", count: 101)), field: "token", mentions: "202 characters; at most 200 hex digits"),
        Bad("token of 30000 bytes", body(token: String(repeating: "ab", count: 30_000)), field: "token", mentions: "at most 200"),
        Bad("binary token of 33 bytes", body(token: String(repeating: "ab", count: 33)), transport: .binary, field: "token", mentions: "got 33 bytes"),

        Bad("missing payload", #"{"token":"ab"}"#, field: "payload", mentions: "is required"),
        Bad("payload is a string", body(payload: #""{\"aps\":{}}""#), field: "payload", mentions: "must be an object, got a string"),
        Bad("payload is an array", body(payload: "[]"), field: "payload", mentions: "got an array"),
        Bad("payload without aps", body(payload: #"{"alert":"hi"}"#), field: "payload.aps", mentions: "is required"),
        Bad("aps is a string", body(payload: #"{"aps":"hi"}"#), field: "payload.aps", mentions: "must be an object"),
        Bad("aps is null", body(payload: #"{"aps":null}"#), field: "payload.aps", mentions: "got null"),

        Bad("unknown push type", body(#""pushType":"banner""#), field: "pushType", mentions: "unknown push type \"banner\""),
        Bad("push type is case-sensitive", body(#""pushType":"Alert""#), field: "pushType", mentions: "expected one of alert"),
        Bad("push type is a number", body(#""pushType":1"#), field: "pushType", mentions: "must be a string"),

        Bad("priority 7", body(#""priority":7"#), field: "priority", mentions: "must be 10, 5 or 1, got 7"),
        Bad("priority 0", body(#""priority":0"#), field: "priority", mentions: "got 0"),
        Bad("priority as a string", body(#""priority":"10""#), field: "priority", mentions: "must be an integer, got a string"),
        Bad("priority as a fraction", body(#""priority":10.5"#), field: "priority", mentions: "got a number"),
        Bad("priority beyond Int64", body(#""priority":1e300"#), field: "priority", mentions: "got a number"),
        Bad("priority 1 on binary", body(#""priority":1"#), transport: .binary, field: "priority", mentions: "10 or 5 on the binary transport"),

        Bad("negative expiration", body(#""expiration":-1"#), field: "expiration", mentions: "must be 0 or more"),
        Bad("fractional expiration", body(#""expiration":1.5"#), field: "expiration", mentions: "must be an integer"),
        Bad("expiration as a string", body(#""expiration":"0""#), field: "expiration", mentions: "got a string"),
        Bad("expiration beyond 32 bits on binary", body(#""expiration":4294967296"#), transport: .binary, field: "expiration", mentions: "32 bits"),

        Bad("collapseId of 65 bytes", body(#""collapseId":"\#(String(repeating: "c", count: 65))""#), field: "collapseId", mentions: "65 bytes; at most 64"),
        Bad("collapseId of 33 two-byte characters", body(#""collapseId":"\#(String(repeating: "é", count: 33))""#), field: "collapseId", mentions: "66 bytes"),
        Bad("collapseId is a number", body(#""collapseId":5"#), field: "collapseId", mentions: "must be a string"),
        // Contract §2/§4: it becomes a header value, sent with NIOHTTP2's validation off.
        Bad("collapseId with CR LF", body(#""collapseId":"a\r\nx-evil: 1""#), field: "collapseId", mentions: "control character at byte 1"),
        Bad("collapseId with NUL", body(#""collapseId":"\u0000""#), field: "collapseId", mentions: "control character at byte 0"),
        Bad("collapseId with DEL", body(#""collapseId":"ab\u007f""#), field: "collapseId", mentions: "control character at byte 2"),
        Bad("collapseId with a tab", body(#""collapseId":"a\tb""#), field: "collapseId", mentions: "control character"),
        Bad("collapseId with U+001F", body(#""collapseId":"\u001f""#), field: "collapseId", mentions: "control character"),
        // A blank at either end is an invalid HTTP/2 field value (RFC 9110 §5.5); Apple
        // resets the stream, so it must end as malformed, not as a retried transport failure.
        Bad("collapseId with a leading space", body(#""collapseId":" c1""#), field: "collapseId", mentions: "begins or ends with a space"),
        Bad("collapseId with a trailing space", body(#""collapseId":"c1 ""#), field: "collapseId", mentions: "begins or ends with a space"),
        Bad("collapseId of one space", body(#""collapseId":" ""#), field: "collapseId", mentions: "begins or ends with a space"),

        Bad("id is not a UUID", body(#""id":"job-42""#), field: "id", mentions: "not a canonical UUID"),
        Bad("id with braces", body(#""id":"{6f1d2c1e-6b1a-4e8c-9d6f-0123456789ab}""#), field: "id", mentions: "canonical"),
        Bad("id without hyphens", body(#""id":"6f1d2c1e6b1a4e8c9d6f0123456789ab""#), field: "id", mentions: "canonical"),
        Bad("id with a non-hex digit", body(#""id":"6f1d2c1e-6b1a-4e8c-9d6f-0123456789ag""#), field: "id", mentions: "canonical"),
        Bad("id is a number", body(#""id":42"#), field: "id", mentions: "must be a string"),
        Bad("id message strips control characters", body(#""id":"a\nb""#), field: "id", mentions: "\"a?b\""),
        Bad("id message strips C1 and Unicode line breaks", body(#""id":"a\u0085b\u2028c\u2029d""#), field: "id", mentions: "\"a?b?c?d\""),

        Bad("unknown environment", body(#""environment":"staging""#), field: "environment", mentions: "production or sandbox, got \"staging\""),
        Bad("environment is a boolean", body(#""environment":true"#), field: "environment", mentions: "got a boolean"),
        Bad("unknown events level", body(#""events":"some""#), field: "events", mentions: "none, ends or all, got \"some\""),
        Bad("events is a number", body(#""events":1"#), field: "events", mentions: "got an integer"),

        Bad("userInfo is an array", body(#""userInfo":[1]"#), field: "userInfo", mentions: "must be an object"),
        Bad("userInfo is a string", body(#""userInfo":"x""#), field: "userInfo", mentions: "got a string"),
    ]

    /// JSON Schema's "integer" (docs/schemas/) is any number without a fraction, however it is
    /// written: the parser agrees, so `10.0` and `1e3` are the integers 10 and 1000.
    @Test func integerFieldsAcceptWholeNumbersWrittenWithAFractionOrExponent() throws {
        let job = try Self.parse(Self.body(#""priority":10.0,"expiration":1e3"#)).get()
        #expect(job.priority == 10)
        #expect(job.expiration == 1000)
        let low = try Self.parse(Self.body(#""priority":5E0,"expiration":0.0"#)).get()
        #expect(low.priority == 5)
        #expect(low.expiration == 0)
    }

    @Test(arguments: badBodies)
    func rejectsBadBody(_ bad: Bad) {
        let result = JobParser.parse(
            body: bad.body, bundleID: Self.bundle, messageID: nil, defaultEnvironment: .production,
            transport: bad.transport, makeID: { Self.fixedID })
        guard case .failure(let error) = result else {
            Issue.record("accepted: \(bad.name)")
            return
        }
        #expect(error.field == bad.field)
        #expect(error.kind == bad.kind)
        #expect(error.reason == bad.kind.rawValue)
        #expect(error.message.contains(bad.mentions), "message: \(error.message)")
        #expect(!error.message.contains("\n"))
    }

    @Test func tokenNeverAppearsInErrors() {
        let secret = "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab1x"
        guard case .failure(let error) = Self.parse(Self.body(token: secret)) else {
            Issue.record("accepted a bad token")
            return
        }
        #expect(!error.description.contains("ab12cd34"))
    }

    // MARK: payload sizes (bytes as sent)

    /// A payload of exactly `size` bytes when compact: `{"aps":{},"x":"fff…"}`.
    static func payload(ofSize size: Int) -> String {
        let base = #"{"aps":{},"x":""}"#.utf8.count
        return #"{"aps":{},"x":"\#(String(repeating: "f", count: size - base))"}"#
    }

    static let sizeCases: [(PushType, TransportKind, Int)] = [
        (.alert, .http2, 4096), (.background, .http2, 4096), (.voip, .http2, 5120),
        (.liveactivity, .http2, 4096), (.widgets, .http2, 4096),
        (.alert, .binary, 2048), (.voip, .binary, 2048),
    ]

    @Test(arguments: sizeCases)
    func payloadLimitPerPushTypeAndTransport(_ pushType: PushType, _ transport: TransportKind, _ limit: Int) throws {
        #expect(JobParser.payloadLimit(pushType: pushType, transport: transport) == limit)
        let atLimit = Self.body(payload: Self.payload(ofSize: limit), #""pushType":"\#(pushType.rawValue)""#)
        let job = try Self.parse(atLimit, transport: transport).get()
        #expect(job.payload.count == limit)

        let over = Self.body(payload: Self.payload(ofSize: limit + 1), #""pushType":"\#(pushType.rawValue)""#)
        guard case .failure(let error) = Self.parse(over, transport: transport) else {
            Issue.record("accepted \(limit + 1) bytes for \(pushType) on \(transport)")
            return
        }
        #expect(error.kind == .payloadTooLarge)
        #expect(error.reason == "PayloadTooLarge")
        #expect(error.field == "payload")
        #expect(error.message == "is \(limit + 1) bytes as sent; at most \(limit) for \(pushType.rawValue) on \(transport.rawValue)")
    }

    @Test func limitAppliesToCompactBytesNotToTheBody() throws {
        // 4096 bytes compact, padded with 3000 bytes of whitespace in the body.
        let compact = Self.payload(ofSize: 4096)
        let padded = compact.replacingOccurrences(of: #""aps":{}"#, with: #""aps"   :   {}"# + String(repeating: " ", count: 3000))
        let job = try Self.parse(Self.body(payload: padded)).get()
        #expect(job.payload == Array(compact.utf8))
    }

    @Test func voipSizeOnlyForVoip() {
        let body = Self.body(payload: Self.payload(ofSize: 5000))
        guard case .failure(let error) = Self.parse(body) else {
            Issue.record("5000-byte alert accepted")
            return
        }
        #expect(error.kind == .payloadTooLarge)
    }

    // MARK: hostile bodies

    /// The size check comes before any parsing: the error names the limit, not a JSON fault.
    /// (How fast that is belongs to the benchmark, not to a timed test.)
    @Test func tenMegabyteBodyIsRefusedBeforeParsing() {
        var huge = Array(#"{"token":"ab","payload":{"aps":{},"x":""#.utf8)
        huge += [UInt8](repeating: UInt8(ascii: "f"), count: 10 * 1024 * 1024)
        huge.append(contentsOf: Array(#""}}"#.utf8))
        let result = Self.parse(bytes: huge)
        guard case .failure(let error) = result else {
            Issue.record("10 MB body accepted")
            return
        }
        #expect(error.field == "body")
        #expect(error.kind == .malformedJob)
        #expect(error.message.contains("at most 65536"))
    }

    @Test func bodyLimitIsConfigurable() {
        let body = Self.body()
        let result = JobParser.parse(
            body: Array(body.utf8), bundleID: Self.bundle, messageID: nil, defaultEnvironment: .production,
            transport: .http2, limits: JobParser.Limits(maxBodyBytes: 20), makeID: { Self.fixedID })
        guard case .failure(let error) = result else {
            Issue.record("body over the limit accepted")
            return
        }
        #expect(error.message.contains("at most 20"))
    }

    /// The whole body nests `levels` arrays inside `userInfo`: the top-level object is level 1.
    static func nested(arrays levels: Int) -> [UInt8] {
        Array(Self.body(#""userInfo":{"n":\#(String(repeating: "[", count: levels))\#(String(repeating: "]", count: levels))}"#).utf8)
    }

    @Test func nestingUpToTheLimitIsAccepted() throws {
        // root object (1) + userInfo object (2) + 62 arrays = 64 levels.
        let job = try Self.parse(bytes: Self.nested(arrays: 62)).get()
        #expect(job.userInfo["n"] != nil)
    }

    @Test func nestingBeyondTheLimitIsRefused() {
        guard case .failure(let error) = Self.parse(bytes: Self.nested(arrays: 63)) else {
            Issue.record("65 levels accepted")
            return
        }
        #expect(error.field == "body")
        #expect(error.message.contains("nesting deeper than 64 levels"))
    }

    /// The shared header-value rule holds for every header a parsed job becomes, whatever its
    /// text fields held: each value passes `UntrustedText.headerValueProblem`.
    @Test(arguments: [
        body(#""collapseId":"a b é\u0080","pushType":"voip","priority":5,"expiration":0"#),
        body(#""collapseId":"ééé","environment":"sandbox","pushType":"location""#),
        #"{"channel":"dHN0LXNyY2gtY2hubA==","payload":{"aps":{"event":"update"}}}"#,
    ])
    func everyHeaderValueOfAParsedJobIsAValidFieldValue(_ body: String) throws {
        let job = try Self.parse(body).get()
        let request = HTTP2Request(notification: job.notification, authority: "api.push.apple.com", authorization: "bearer x.y.z")
        for field in request.headers {
            #expect(UntrustedText.headerValueProblem(field.value) == nil, "\(field.name): \(field.value)")
        }
    }

    @Test(arguments: [(" x", "begins or ends"), ("x\t", "control character at byte 1"), ("a\r\nb", "control character at byte 1"), ("x ", "begins or ends")])
    func theHeaderValueRuleRefusesBlankEndsAndControlCharacters(_ value: String, _ reason: String) {
        #expect(UntrustedText.headerValueProblem(value)?.contains(reason) == true)
    }

    @Test(arguments: ["", "a b", "é", "c1"])
    func theHeaderValueRuleAcceptsInnerSpacesAndNonASCII(_ value: String) {
        #expect(UntrustedText.headerValueProblem(value) == nil)
    }

    /// A group job is validated by a probe through `JobParser` (contract §6), so it inherits the
    /// header-injection check: a control character in its `collapseId` makes it malformed.
    @Test(arguments: [#"" x""#, #""x ""#])
    func aGroupJobWithABlankAtAnEndOfItsCollapseIdIsMalformed(collapseID: String) {
        let body = #"{"group":"g","payload":{"aps":{"alert":"x"}},"collapseId":\#(collapseID)}"#
        guard case .failure(let error) = GroupJobParser.parse(body: Array(body.utf8), messageID: nil) else {
            Issue.record("accepted \(body)")
            return
        }
        #expect(error.field == "collapseId")
    }

    @Test(arguments: [#""a\r\nb""#, #""\u0000""#, #""x\u007f""#])
    func aGroupJobWithAControlCharacterInItsCollapseIdIsMalformed(collapseID: String) {
        let body = #"{"group":"g","payload":{"aps":{"alert":"x"}},"collapseId":\#(collapseID)}"#
        guard case .failure(let error) = GroupJobParser.parse(body: Array(body.utf8), messageID: nil) else {
            Issue.record("accepted \(body)")
            return
        }
        #expect(error.field == "collapseId")
        #expect(error.message.contains("control character"))
    }

    @Test func pathologicalNestingDoesNotCrash() {
        // 60 000 levels would overflow the stack of a recursive parser without a depth limit.
        var deep = Array(#"{"token":"ab","payload":{"aps":{}},"userInfo":"#.utf8)
        deep.append(contentsOf: repeatElement(UInt8(ascii: "["), count: 30_000))
        deep.append(contentsOf: repeatElement(UInt8(ascii: "]"), count: 30_000))
        deep.append(UInt8(ascii: "}"))
        guard case .failure(let error) = Self.parse(bytes: deep) else {
            Issue.record("deep nesting accepted")
            return
        }
        #expect(error.message.contains("nesting deeper"))
        var unclosed = Array(#"{"token":"ab","payload":"#.utf8)
        unclosed.append(contentsOf: repeatElement(UInt8(ascii: "["), count: 30_000))
        guard case .failure(let unclosedError) = Self.parse(bytes: unclosed) else {
            Issue.record("unclosed nesting accepted")
            return
        }
        #expect(unclosedError.message.contains("nesting deeper"))
    }
}
