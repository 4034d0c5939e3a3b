// The worker's writer of delivery events (`APNSModel.DeliveryEvent.jsonBytes`) against the
// client's reader (`DeliveryEvent.parse`, which `apns-worker events` reads with too): every end,
// every kind of target, with and without a group job, reads back as written. And the reader's
// line for a person watching.
import APNSModel
// Scoped: APNSModel has a DeliveryEvent of its own (the writer's), and the module's name is also
// its client class's, so `APNSWorkerClient.DeliveryEvent` would not name the reader's.
import struct APNSWorkerClient.DeliveryEvent
import Foundation
import Testing

@Suite struct DeliveryEventReaderTests {
    static let at = Date(timeIntervalSince1970: 1_700_000_000.75)
    static let token = String(repeating: "ab", count: 32)
    static let channel = "dHN0LTEyMzQ1Njc4OTAxMg=="
    static let jobID = "5e2d0c8b-7e4b-4c8a-9a51-6c0e8c7b7d11"
    static let groupJobID = "0f4c8e2a-1b3d-4e5f-8a9b-0c1d2e3f4a5b"

    /// The worker's event for `end`, with facts as the router gives them for that end.
    static func written(_ end: APNSModel.DeliveryEvent.End, target: PushTarget?, group: Bool) -> APNSModel.DeliveryEvent {
        let delivered = end == .delivered
        return APNSModel.DeliveryEvent(
            jobId: jobID, bundleId: "com.example.app", end: end, reason: delivered ? nil : (target == nil ? "MalformedJob" : "BadDeviceToken"),
            status: target == nil ? 0 : (delivered ? 200 : 400), apnsId: target == nil ? nil : "8b1c6d2e-0000-4000-8000-000000000001",
            apnsUniqueId: end == .invalidToken ? "u-1" : nil, attempts: target == nil ? 0 : 2, at: at, target: target,
            environment: end == .retried ? .sandbox : .production, groupJobId: group ? groupJobID : nil)
    }

    @Test(arguments: APNSModel.DeliveryEvent.End.allCases)
    func everyEndsEventReadsBackAsTheWorkerWroteIt(_ end: APNSModel.DeliveryEvent.End) throws {
        let targets: [(PushTarget?, DeliveryEvent.Target?)] = [
            (.device(try #require(DeviceToken(hex: Self.token))), .token(Self.token)),
            (.channel(try #require(BroadcastChannel(id: Self.channel))), .channel(Self.channel)),
            (nil, nil),
        ]
        for (target, readTarget) in targets {
            for group in [false, true] {
                let written = Self.written(end, target: target, group: group)
                let read = try DeliveryEvent.parseOrThrow(written.jsonBytes())
                #expect(read.jobID == written.jobId && read.bundleID == written.bundleId)
                #expect(read.end.rawValue == written.end.rawValue)
                #expect(read.reason == written.reason && read.status == written.status && read.attempts == written.attempts)
                #expect(read.apnsID == written.apnsId && read.apnsUniqueID == written.apnsUniqueId)
                #expect(read.at == RFC3339.date(from: written.at) && read.at == Date(timeIntervalSince1970: 1_700_000_000))
                #expect(read.target == readTarget)
                #expect(read.environment == written.environment.rawValue)
                #expect(read.groupJobID == written.groupJobId)
            }
        }
    }

    /// The ends' names are the same on both sides (the routing key and the body spell them).
    @Test func theReaderKnowsEveryEndTheWriterWrites() {
        #expect(APNSModel.DeliveryEvent.End.allCases.map(\.rawValue) == DeliveryEvent.End.allCases.map(\.rawValue))
    }

    /// `apns-worker events`' line: the token redacted, hostile text unable to start a line of its own.
    @Test func aPersonsLineRedactsTheTokenAndNeverBreaksTheLine() throws {
        var event = try DeliveryEvent.parseOrThrow(
            Self.written(.dead, target: .device(try #require(DeviceToken(hex: Self.token))), group: false).jsonBytes())
        event.jobID = "j-1\n\u{1b}[2J"
        event.reason = "BadExpirationDate"
        event.status = 400
        event.attempts = 1
        #expect(event.line == "2023-11-14T22:13:20Z  dead  job j-1??[2J  abab…abab  status 400  BadExpirationDate  attempts 1  production")
        event.reason = nil
        event.end = .delivered
        event.groupJobID = "g"
        #expect(event.line == "2023-11-14T22:13:20Z  delivered  job j-1??[2J  abab…abab  status 400  attempts 1  production  group g")
        event.target = .channel(Self.channel)
        event.groupJobID = nil
        #expect(event.line == "2023-11-14T22:13:20Z  delivered  job j-1??[2J  channel dHN0…Mg==  status 400  attempts 1  production")
        event.target = nil
        #expect(event.line == "2023-11-14T22:13:20Z  delivered  job j-1??[2J  -  status 400  attempts 1  production")
    }
}
