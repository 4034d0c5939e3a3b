import APNSJSON
import APNSModel
import Foundation
import Testing

/// Contract §8's event as a value: its body, routing key and message id; which ends a level wants.
@Suite struct DeliveryEventTests {
    static let at = Date(timeIntervalSince1970: 1_700_000_000.75)
    static let token = DeviceToken(hex: String(repeating: "ab", count: 32))!

    static func json(_ event: DeliveryEvent) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(event.jsonBytes())) as? [String: Any])
    }

    @Test func aDeliveredEventHasEveryFieldWithNullsWhereThereIsNoValue() throws {
        let event = DeliveryEvent(
            jobId: "5E2D0C8B-7E4B-4C8A-9A51-6C0E8C7B7D11", bundleId: "com.example.app", end: .delivered, reason: nil, status: 200,
            apnsId: "5e2d0c8b-7e4b-4c8a-9a51-6c0e8c7b7d11", apnsUniqueId: nil, attempts: 1, at: Self.at, target: .device(Self.token),
            environment: .production, groupJobId: nil)
        let json = try Self.json(event)
        #expect(
            Set(json.keys) == [
                "jobId", "bundleId", "end", "reason", "status", "apnsId", "apnsUniqueId", "attempts", "at", "token", "environment",
            ])
        #expect(json["end"] as? String == "delivered")
        #expect(json["reason"] is NSNull)
        #expect(json["apnsUniqueId"] is NSNull)
        #expect((json["status"] as? NSNumber)?.intValue == 200)
        #expect((json["attempts"] as? NSNumber)?.intValue == 1)
        #expect(json["token"] as? String == String(repeating: "ab", count: 32))
        #expect(json["environment"] as? String == "production")
        // RFC 3339, UTC, whole seconds.
        #expect(json["at"] as? String == "2023-11-14T22:13:20Z")
        #expect(RFC3339.date(from: json["at"] as? String ?? "") == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(event.routingKey == "com.example.app.delivered")
        #expect(event.messageID == "5E2D0C8B-7E4B-4C8A-9A51-6C0E8C7B7D11.delivered.1")
    }

    @Test func aBroadcastsEventNamesItsChannelAndAFannedOutJobItsGroupJob() throws {
        let channel = try #require(BroadcastChannel(id: "dHN0LTEyMzQ1Njc4OTAxMg=="))
        let event = DeliveryEvent(
            jobId: "j", bundleId: "b.c", end: .dead, reason: "BadChannelId", status: 400, apnsId: nil, apnsUniqueId: "u-1",
            attempts: 2, at: Self.at, target: .channel(channel), environment: .sandbox, groupJobId: "g-1")
        let json = try Self.json(event)
        #expect(json["channel"] as? String == "dHN0LTEyMzQ1Njc4OTAxMg==")
        #expect(json["token"] == nil)
        #expect(json["groupJobId"] as? String == "g-1")
        #expect(json["apnsUniqueId"] as? String == "u-1")
        #expect(json["environment"] as? String == "sandbox")
        #expect(event.routingKey == "b.c.dead")
        #expect(event.messageID == "j.dead.2")
    }

    /// The client reads it back (`DeliveryEventReaderTests`, with every other end and target).
    @Test func anUnreadJobsEventHasAnEmptyToken() throws {
        let event = DeliveryEvent(
            jobId: "j", bundleId: "b.c", end: .dead, reason: "MalformedJob", status: 0, apnsId: nil, apnsUniqueId: nil, attempts: 0,
            at: Self.at, target: nil, environment: .production, groupJobId: nil)
        #expect(try Self.json(event)["token"] as? String == "")
    }

    /// The body written in one pass is byte for byte the one the sorted writer makes of the same
    /// members (keys in byte order), for a device's event, a broadcast's with every optional
    /// member, an unread job's, and text that needs escaping.
    @Test func theOnePassBodyIsTheSortedWritersByteForByte() throws {
        let channel = try #require(BroadcastChannel(id: "dHN0LTEyMzQ1Njc4OTAxMg=="))
        let events = [
            DeliveryEvent(
                jobId: "5E2D0C8B-7E4B-4C8A-9A51-6C0E8C7B7D11", bundleId: "com.example.app", end: .delivered, reason: nil, status: 200,
                apnsId: "5e2d0c8b-7e4b-4c8a-9a51-6c0e8c7b7d11", apnsUniqueId: nil, attempts: 1, at: Self.at, target: .device(Self.token),
                environment: .production, groupJobId: nil),
            DeliveryEvent(
                jobId: "j", bundleId: "b.c", end: .dead, reason: "BadChannelId", status: 400, apnsId: nil, apnsUniqueId: "u-1",
                attempts: 2, at: Self.at, target: .channel(channel), environment: .sandbox, groupJobId: "g-1"),
            DeliveryEvent(
                jobId: "j\"\\\n\u{1}é", bundleId: "b.c", end: .retried, reason: "Too\tMany", status: 429, apnsId: nil, apnsUniqueId: nil,
                attempts: 3, at: Self.at, target: nil, environment: .production, groupJobId: nil),
        ]
        for event in events {
            var members: [String: FlatJSON.Value] = [
                "jobId": .string(event.jobId), "bundleId": .string(event.bundleId), "end": .string(event.end.rawValue),
                "reason": event.reason.map { .string($0) } ?? .null, "status": .integer(Int64(event.status)),
                "apnsId": event.apnsId.map { .string($0) } ?? .null, "apnsUniqueId": event.apnsUniqueId.map { .string($0) } ?? .null,
                "attempts": .integer(Int64(event.attempts)), "at": .string(event.at), "environment": .string(event.environment.rawValue),
            ]
            if let channel = event.channel { members["channel"] = .string(channel) } else { members["token"] = .string(event.token ?? "") }
            if let group = event.groupJobId { members["groupJobId"] = .string(group) }
            #expect(event.jsonBytes() == FlatJSON.object(members), "\(String(decoding: event.jsonBytes(), as: UTF8.self))")
            #expect(try JSONSerialization.jsonObject(with: Data(event.jsonBytes())) is [String: Any])
        }
    }

    @Test func eachLevelWantsItsEnds() {
        for end in DeliveryEvent.End.allCases {
            #expect(!DeliveryEventLevel.none.wants(end))
            #expect(DeliveryEventLevel.ends.wants(end) == (end != .retried))
            #expect(DeliveryEventLevel.all.wants(end))
        }
    }

    @Test func onlyTheContractsEndsHaveAnEvent() {
        #expect(DeliveryEvent.End(.delivered) == .delivered)
        #expect(DeliveryEvent.End(.invalidToken) == .invalidToken)
        #expect(DeliveryEvent.End(.dead) == .dead)
        #expect(DeliveryEvent.End(.retry) == .retried)
        for end in [JobEnd.held, .gated, .fannedOut, .coalesced, .trailing] { #expect(DeliveryEvent.End(end) == nil) }
    }
}
