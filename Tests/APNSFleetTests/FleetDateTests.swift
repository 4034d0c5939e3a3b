import APNSFleet
import APNSModel
import Foundation
import Testing

/// The fleet's dates since `FleetJSON` writes and reads them with `RFC3339` instead of
/// Foundation's `.iso8601` (which went through ICU): the bytes on the wire are the ones the
/// `.iso8601` encoder wrote, so instances of both builds read each other, and a heartbeat whose
/// date is not RFC 3339 is still ignored whole.
struct FleetDateTests {
    /// The encoder `FleetJSON` had before, as the oracle.
    static let iso8601Encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    static func instance(startedAt: Date, publishedAt: Date?, lastSeen: Date? = nil) -> FleetInstance {
        var instance = FleetTests.instance("a", delivered: 3)
        instance.startedAt = startedAt
        instance.lastSeen = lastSeen
        instance.bundles["com.example.app"]?.lastTakenPublishedAt = publishedAt
        return instance
    }

    /// A heartbeat message around an instance's JSON, keys sorted as `FleetJSON` writes them.
    static func heartbeat(_ instanceJSON: [UInt8]) -> [UInt8] {
        Array(#"{"instance":"#.utf8) + instanceJSON + Array(#","kind":"heartbeat"}"#.utf8)
    }

    /// An instance's JSON with `startedAt` replaced by `value` (JSON text).
    static func instanceJSON(startedAt value: String) throws -> String {
        let json = try FleetJSON.encoder.encode(instance(startedAt: Date(timeIntervalSince1970: 0), publishedAt: nil))
        return String(decoding: json, as: UTF8.self).replacingOccurrences(of: #""1970-01-01T00:00:00Z""#, with: value)
    }

    @Test(arguments: [0, 1_800_000_000.7, 1_795_769_845.999_9, 951_782_400, 4_102_444_799.5])
    func theWireBytesAreTheOnesISO8601Wrote(seconds: Double) throws {
        let sent = Self.instance(
            startedAt: Date(timeIntervalSince1970: seconds), publishedAt: Date(timeIntervalSince1970: seconds - 0.25),
            lastSeen: Date(timeIntervalSince1970: seconds + 1))
        #expect(try FleetJSON.encoder.encode(sent) == Self.iso8601Encoder.encode(sent))
        // And the message around it.
        let wire = FleetMessage.heartbeat(sent).encoded()
        #expect(wire == Self.heartbeat(Array(try Self.iso8601Encoder.encode(sent))))
    }

    @Test func aHeartbeatTheISO8601EncoderWroteIsReadToTheSecond() throws {
        let sent = Self.instance(startedAt: Date(timeIntervalSince1970: 1_800_000_000.7), publishedAt: Date(timeIntervalSince1970: 1_799_999_990))
        let read = try #require(FleetMessage.decode(Self.heartbeat(Array(try Self.iso8601Encoder.encode(sent)))))
        var expected = sent
        expected.startedAt = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(read == .heartbeat(expected))
    }

    /// A heartbeat as another build might write it: fractional seconds, an offset.
    @Test func rfc3339WithAFractionOrAnOffsetIsRead() throws {
        for (date, seconds) in [("2027-01-15T09:00:00.5+01:00", 1_800_000_000.5), ("2027-01-15T08:00:00.25Z", 1_800_000_000.25)] {
            guard case .heartbeat(let instance) = FleetMessage.decode(Self.heartbeat(Array(try Self.instanceJSON(startedAt: "\"\(date)\"").utf8))) else {
                Issue.record("\(date) was not read")
                continue
            }
            #expect(abs(instance.startedAt.timeIntervalSince1970 - seconds) < 1e-6)
        }
    }

    @Test(arguments: [
        "2027-02-30T00:00:00Z", "2027-01-15T24:00:00Z", "2027-01-15T08:00:00", "2027-01-15T08:00:00Zjunk", "2027-01-15T08:00:00+19:00",
        "tomorrow", "", "２０２７-01-15T08:00:00Z", "99999999999999999999-01-15T08:00:00Z",
    ])
    func aHeartbeatWithADateThatIsNotRFC3339IsIgnored(date: String) throws {
        let json = try Self.instanceJSON(startedAt: "\"\(date)\"")
        #expect(FleetMessage.decode(Self.heartbeat(Array(json.utf8))) == nil)
        // The same kind of error `.iso8601` threw.
        #expect {
            try FleetJSON.decoder.decode(FleetInstance.self, from: Data(json.utf8))
        } throws: { error in
            guard case DecodingError.dataCorrupted = error else { return false }
            return true
        }
    }

    @Test func aNumberWhereADateBelongsIsIgnored() throws {
        #expect(FleetMessage.decode(Self.heartbeat(Array(try Self.instanceJSON(startedAt: "0").utf8))) == nil)
        #expect(FleetMessage.decode(Self.heartbeat(Array(try Self.instanceJSON(startedAt: "null").utf8))) == nil)
    }
}
