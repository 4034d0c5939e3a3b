/// The HTTP/2 request mapping and response parsing of the provider API.
import APNSModel
import Foundation
import Testing

@Suite struct HTTP2RequestTests {
    let id = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!

    func notification(expiration: Int? = nil, collapseID: String? = nil) -> PushNotification {
        PushNotification(
            id: id, token: DeviceToken(hex: "ABCDEF0123456789")!, topic: "com.example.app.voip", pushType: .voip,
            priority: 10, expiration: expiration, collapseID: collapseID, payload: Array(#"{"aps":{}}"#.utf8),
            environment: .production)
    }

    @Test func mapsEveryHeader() {
        let request = HTTP2Request(
            notification: notification(expiration: 0, collapseID: "c1"), authority: "api.push.apple.com",
            authorization: "bearer x.y.z")
        #expect(Array(request.headers.prefix(4).map(\.name)) == [":method", ":scheme", ":path", ":authority"])
        #expect(request.header(":method") == "POST")
        #expect(request.header(":path") == "/3/device/abcdef0123456789")
        #expect(request.header(":authority") == "api.push.apple.com")
        #expect(request.header("apns-id") == "e621e1f8-c36c-495a-93fc-0c247a3e6e5f")
        #expect(request.header("apns-topic") == "com.example.app.voip")
        #expect(request.header("apns-push-type") == "voip")
        #expect(request.header("apns-priority") == "10")
        #expect(request.header("apns-expiration") == "0")
        #expect(request.header("apns-collapse-id") == "c1")
        #expect(request.header("authorization") == "bearer x.y.z")
        #expect(request.header("content-length") == "10")
        #expect(request.body == Array(#"{"aps":{}}"#.utf8))
    }

    @Test func optionalHeadersOnlyWhenSet() {
        let request = HTTP2Request(notification: notification(), authority: "h", authorization: nil)
        #expect(request.header("apns-expiration") == nil)
        #expect(request.header("apns-collapse-id") == nil)
        #expect(request.header("authorization") == nil)
        // No header twice.
        #expect(Set(request.headers.map(\.name)).count == request.headers.count)
    }

    @Test func defaultHosts() {
        #expect(APNSEnvironment.production.defaultHost == "api.push.apple.com")
        #expect(APNSEnvironment.sandbox.defaultHost == "api.sandbox.push.apple.com")
    }
}

@Suite struct HTTP2ResponseTests {
    @Test func success() {
        let answer = HTTP2Response.answer(
            status: 200, headers: [.init(":status", "200"), .init("apns-id", "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")],
            body: [])
        #expect(answer == HTTPAnswer(status: 200, apnsID: UUID(uuidString: "e621e1f8-c36c-495a-93fc-0c247a3e6e5f")))
    }

    @Test func unregisteredWithTimestamp() {
        let answer = HTTP2Response.answer(
            status: 410, headers: [.init("apns-unique-id", "u-1")],
            body: Array(#"{"reason":"Unregistered","timestamp":1700000000123}"#.utf8))
        #expect(answer.status == 410)
        #expect(answer.reason == .unregistered)
        #expect(answer.timestamp == 1_700_000_000_123)
        #expect(answer.uniqueID == "u-1")
    }

    @Test func unknownReasonIsKept() {
        let answer = HTTP2Response.answer(status: 400, headers: [], body: Array(#"{"reason":"SomethingNew"}"#.utf8))
        #expect(answer.reason == .unknown("SomethingNew"))
        #expect(answer.timestamp == nil)
    }

    @Test(arguments: ["", "not json", "[1,2]", #"{"reason":42}"#, "{\"reason\":\"BadDevi"])
    func unparsableBodyKeepsTheStatus(body: String) {
        let answer = HTTP2Response.answer(status: 413, headers: [.init("apns-id", "garbage")], body: Array(body.utf8))
        #expect(answer == HTTPAnswer(status: 413))
    }
}
