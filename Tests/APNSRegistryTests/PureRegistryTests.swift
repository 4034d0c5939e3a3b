import APNSConfig
import APNSJSON
import APNSModel
import APNSRegistryMessages
import Foundation
import Testing

@testable import APNSRegistry

/// The registry's pure parts: message parsing, UUIDv5 ids, fan-out bodies, count aggregation,
/// the hold state machine and the `[registry]` URL. No sockets.
@Suite struct PureRegistryTests {
    func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test func registerMessageParses() throws {
        let message = try RegistrationMessage.parse(
            body: bytes(#"{"op":"register","bundleId":"com.example.app","token":"ABCDEF","group":"acct-1","environment":"sandbox","at":1700000000000}"#)
        ).get()
        #expect(message.op == .register)
        #expect(message.token == "abcdef")
        #expect(message.group == "acct-1")
        #expect(message.environment == .sandbox)
        #expect(message.at == 1_700_000_000_000)
    }

    @Test(arguments: [
        (#"{"op":"register","bundleId":"b","token":"ab","at":1}"#, "group"),
        (#"{"op":"move","bundleId":"b","token":"ab","at":1}"#, "op"),
        (#"{"op":"unregister","bundleId":"b","token":"xyz","at":1}"#, "token"),
        (#"{"op":"unregister","bundleId":"b","token":"abc","at":1}"#, "token"),
        (#"{"op":"unregister","bundleId":"b","token":"ab","at":"1"}"#, "at"),
        (#"{"op":"unregister","bundleId":"b","token":"ab"}"#, "at"),
        (#"{"op":"unregister","token":"ab","at":1}"#, "bundleId"),
        (#"{"op":"register","bundleId":"b","token":"ab","group":"","at":1}"#, "group"),
        (#"{"op":"register","bundleId":"b","token":"ab","group":"g","environment":"dev","at":1}"#, "environment"),
        (#"not json"#, "body"),
    ])
    func malformedRegistrationsNameTheField(body: String, field: String) {
        guard case .failure(let error) = RegistrationMessage.parse(body: bytes(body)) else {
            Issue.record("accepted \(body)")
            return
        }
        #expect(error.field == field)
        #expect(error.reason == "MalformedJob")
    }

    @Test func groupLongerThan200BytesIsMalformed() {
        let group = String(repeating: "é", count: 101)  // 202 bytes
        let body = #"{"op":"register","bundleId":"b","token":"ab","group":"\#(group)","at":1}"#
        guard case .failure(let error) = RegistrationMessage.parse(body: bytes(body)) else {
            Issue.record("accepted a 202-byte group")
            return
        }
        #expect(error.field == "group")
    }

    @Test func uuidV5MatchesTheRFC() {
        #expect(UUIDv5.make(name: "http://example.com").uuidString.lowercased() == "8c9ddcb0-8084-5a7f-a988-1095ab18b5df")
        let group = UUID(uuidString: "0b8e6a8c-2f3b-4d1e-9a7c-5e4f3d2c1b0a")!
        #expect(
            UUIDv5.fanOutJobID(groupJobID: group, bundleID: "com.example.app", token: "ABCD").uuidString.lowercased()
                == "6b30e39f-3cd2-5d5f-bb88-250e71eaaa2e")
    }

    @Test func groupJobBuildsSectionTwoJobsPerDevice() throws {
        let body = #"""
            {"group":"acct-1","id":"0B8E6A8C-2F3B-4D1E-9A7C-5E4F3D2C1B0A","payload":{ "aps" : {"content-available":1}, "z":1.50 },
             "priority":5,"except":["ABCD"],"bundleIds":["com.a","com.b"],"userInfo":{"syncServer":"s1","group":"spoofed"},"unknown":true}
            """#
        let job = try GroupJobParser.parse(body: bytes(body), messageID: nil).get()
        #expect(job.group == "acct-1")
        #expect(job.includes(bundleID: "com.a", token: "00ff"))
        #expect(!job.includes(bundleID: "com.a", token: "abcd"))
        #expect(!job.includes(bundleID: "com.c", token: "00ff"))
        let (id, device) = job.jobBody(bundleID: "com.a", token: "00FF", environment: .sandbox)
        #expect(id == UUIDv5.fanOutJobID(groupJobID: job.id, bundleID: "com.a", token: "00ff"))
        let parsed = try JobParser.parse(
            body: device, bundleID: "com.a", messageID: nil, defaultEnvironment: .production, transport: .http2
        ).get()
        #expect(parsed.id == id)
        #expect(parsed.token?.hex == "00ff")
        #expect(parsed.environment == .sandbox)
        #expect(parsed.priority == 5)
        #expect(String(decoding: parsed.payload, as: UTF8.self) == #"{"aps":{"content-available":1},"z":1.50}"#)
        #expect(parsed.userInfo["group"] == .string("acct-1"))
        #expect(parsed.userInfo["groupJobId"] == .string("0b8e6a8c-2f3b-4d1e-9a7c-5e4f3d2c1b0a"))
        #expect(parsed.userInfo["syncServer"] == .string("s1"))
    }

    @Test func groupJobIdIsStableWithoutAnId() throws {
        let body = bytes(#"{"group":"g","payload":{"aps":{"alert":"x"}}}"#)
        let first = try GroupJobParser.parse(body: body, messageID: "not-a-uuid").get()
        let again = try GroupJobParser.parse(body: body, messageID: nil).get()
        #expect(first.id == again.id)
        let fromMessageID = try GroupJobParser.parse(body: body, messageID: "0b8e6a8c-2f3b-4d1e-9a7c-5e4f3d2c1b0a").get()
        #expect(fromMessageID.id.uuidString.lowercased() == "0b8e6a8c-2f3b-4d1e-9a7c-5e4f3d2c1b0a")
    }

    @Test(arguments: [
        (#"{"payload":{"aps":{}}}"#, "group"),
        (#"{"group":7,"payload":{"aps":{}}}"#, "group"),
        (#"{"group":"g"}"#, "payload"),
        (#"{"group":"g","payload":{"x":1}}"#, "payload.aps"),
        (#"{"group":"g","payload":{"aps":{}},"priority":7}"#, "priority"),
        (#"{"group":"g","payload":{"aps":{}},"pushType":"nope"}"#, "pushType"),
        (#"{"group":"g","payload":{"aps":{}},"except":"ab"}"#, "except"),
        (#"{"group":"g","payload":{"aps":{}},"bundleIds":[1]}"#, "bundleIds"),
        (#"{"group":"g","payload":{"aps":{}},"id":"nope"}"#, "id"),
    ])
    func malformedGroupJobsNameTheField(body: String, field: String) {
        guard case .failure(let error) = GroupJobParser.parse(body: bytes(body), messageID: nil) else {
            Issue.record("accepted \(body)")
            return
        }
        #expect(error.field == field)
    }

    @Test func countsAggregatePerBundleHourAndEnd() throws {
        var counts = CountAggregator()
        counts.add(bundleID: "a", end: .delivered, epochSeconds: 7200 + 5)
        counts.add(bundleID: "a", end: .delivered, epochSeconds: 7200 + 3599)
        counts.add(bundleID: "a", end: .delivered, epochSeconds: 10800)
        counts.add(bundleID: "b", end: .dead, epochSeconds: 7300, count: 4)
        let batch = counts.take()
        #expect(counts.isEmpty)
        let key = { (bundle: String, hour: Int64, end: JobEnd) in try #require(CountAggregator.Key(bundleID: bundle, hour: hour, end: end)) }
        #expect(batch[try key("a", 7200, .delivered)] == 2)
        #expect(batch[try key("a", 10800, .delivered)] == 1)
        #expect(batch[try key("b", 7200, .dead)] == 4)
        counts.merge(batch)
        counts.merge(batch)
        #expect(counts.counts[try key("b", 7200, .dead)] == 8)
    }

    /// What the registry stores is each end's `contractName` (`apns_counts.end_kind`), the
    /// contract's camelCase; `held` has not ended and is never counted.
    @Test func countsKeepTheRegistryNameAndNeverHeld() {
        var counts = CountAggregator()
        for end in JobEnd.allCases { counts.add(bundleID: "a", end: end, epochSeconds: 7200) }
        #expect(
            Set(counts.take().keys.map(\.end))
                == ["delivered", "invalidToken", "retry", "dead", "gated", "fannedOut", "coalesced", "trailing"])
    }

    @Test func postgresURLsParseAndMaskThePassword() throws {
        let url = try PostgresURL(parsing: "postgres://apns:s%40cret@db.example:5433/apns?sslmode=disable")
        #expect(url.host == "db.example")
        #expect(url.port == 5433)
        #expect(url.user == "apns")
        #expect(url.password == "s@cret")
        #expect(url.database == "apns")
        #expect(url.sslMode == .disable)
        #expect(!url.description.contains("cret"))
        for bad in ["mysql://a:secretpw@h/db", "postgres://a:secretpw@h", "postgres://a:secretpw@h/db?sslmode=maybe", "postgres://:secretpw@h/db"] {
            #expect(throws: PostgresURLError.self) { try PostgresURL(parsing: bad) }
            do { _ = try PostgresURL(parsing: bad) } catch { #expect(!error.message.contains("secretpw")) }
        }
    }
}
