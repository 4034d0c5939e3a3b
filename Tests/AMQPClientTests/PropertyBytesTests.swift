import AMQPClient
import Foundation
import Testing

/// Contract §4 "The AMQP envelope is input too", without a broker: short-string properties are
/// kept as the bytes that arrived, and a republished copy drops only `user_id` (kept in
/// `x-apns-user-id`) and `expiration`.
@Suite struct PropertyBytesTests {
    /// Every short-string property on the wire, 255 bytes that are not UTF-8.
    static func wireProperties(_ value: [UInt8], userID: [UInt8]? = nil) -> [UInt8] {
        // Flags: every short string (content type … app id) and the timestamp; no headers.
        let flags: UInt16 = 0b1100_0111_1111_1000 & ~(1 << 6)
        var out = withUnsafeBytes(of: flags.bigEndian, Array.init)
        for field in 0..<9 {
            let bytes = field == 7 ? (userID ?? value) : value
            out += [UInt8(bytes.count)] + bytes
        }
        return out
    }

    /// Bytes that are not UTF-8 read as U+FFFD (three bytes each), grew past 255 bytes, and a
    /// retry or dead letter of such a job could no longer be encoded: the connection dropped and
    /// the job came back, forever.
    @Test func shortStringsThatAreNotUTF8RoundTripByteForByte() throws {
        let value = [UInt8](repeating: 0xFF, count: 255)
        let wire = Self.wireProperties(value)
        let properties = try #require(AMQPWireFormat.decodeProperties(wire))
        for field in AMQPProperties.ShortStringField.allCases {
            #expect(properties.shortString(field)?.bytes == value, "\(field)")
        }
        #expect(AMQPWireFormat.encodeProperties(properties) == wire, "encoded again, the same bytes")
        #expect(properties.messageID == String(repeating: "\u{FFFD}", count: 255), "text readers get U+FFFD")
    }

    @Test func emptyAndUTF8ShortStringsRoundTrip() throws {
        for value in [[UInt8](), Array("é".utf8), Array("e\u{301}".utf8), Array(repeating: UInt8(ascii: "a"), count: 255)] {
            let wire = Self.wireProperties(value)
            let properties = try #require(AMQPWireFormat.decodeProperties(wire))
            #expect(AMQPWireFormat.encodeProperties(properties) == wire)
        }
    }

    /// Equal means equal bytes: "é" and "e" + U+0301 are equal Strings, not equal properties.
    @Test func equalityIsByteEquality() {
        #expect(AMQPShortString("é") != AMQPShortString("e\u{301}"))
        #expect(AMQPShortString(bytes: Array("é".utf8)) == AMQPShortString("é"))
        #expect(AMQPShortString(bytes: [0xC3]) != AMQPShortString("\u{FFFD}"))
        var a = AMQPProperties(), b = AMQPProperties()
        a.messageID = "é"
        b.messageID = "e\u{301}"
        #expect(a != b)
    }

    /// `user_id` makes the broker close the publishing channel (406) unless it names the
    /// worker's user; `expiration` would make a dead job vanish from `.dead`.
    @Test func aRepublishedCopyDropsUserIDAndExpirationAndKeepsTheRestByteForByte() throws {
        let wire = Self.wireProperties([UInt8](repeating: 0x80, count: 255), userID: Array("sync-server".utf8))
        var received = try #require(AMQPWireFormat.decodeProperties(wire))
        received.headers = ["trace": .string("t-1")]
        let copy = received.republished()
        #expect(copy.userID == nil)
        #expect(copy.expiration == nil)
        #expect(copy.headers?[AMQPProperties.originalUserIDHeader] == .string("sync-server"))
        #expect(copy.headers?["trace"] == .string("t-1"))
        for field in AMQPProperties.ShortStringField.allCases where field != .userID && field != .expiration {
            #expect(copy.shortString(field) == received.shortString(field), "\(field)")
        }
        // A user_id that is not UTF-8 is kept as bytes.
        var binary = AMQPProperties()
        binary.setShortString(.userID, AMQPShortString(bytes: [0xFF, 0x00]))
        #expect(binary.republished().headers?[AMQPProperties.originalUserIDHeader] == .bytes([0xFF, 0x00]))
        // Nothing to drop: the same value.
        #expect(AMQPProperties.persistentJSON.republished() == .persistentJSON)
    }

    /// `x-apns-user-id` says only what the worker moved there: a publisher's own, on a message
    /// without `user_id`, goes (every entry of it); with `user_id`, ours replaces every entry.
    @Test func aPublishersOwnOriginalUserIDHeaderNeverSurvivesACopy() throws {
        typealias T = HeaderTableBytesTests
        let forged = T.entry(AMQPProperties.originalUserIDHeader, "S", T.long(Array("admin".utf8)))
        let trace = T.entry("trace", "S", T.long(Array("t-1".utf8)))
        for userID in [nil, "sync-server"] {
            var received = AMQPProperties()
            let kept = received.setHeaderTable(bytes: T.table([forged, trace, forged]))
            #expect(kept)
            received.userID = userID
            let copy = received.republished()
            #expect(copy.headers?[AMQPProperties.originalUserIDHeader] == userID.map(AMQPFieldValue.string))
            #expect(copy.headers?["trace"] == .string("t-1"))
            let encoded = try #require(AMQPWireFormat.encodeProperties(copy))
            let decoded = try #require(AMQPWireFormat.decodeProperties(encoded))
            #expect(decoded.headers?[AMQPProperties.originalUserIDHeader] == userID.map(AMQPFieldValue.string), "on the wire too")
            let table = try #require(decoded.receivedHeaderTable)
            let name = Array(AMQPProperties.originalUserIDHeader.utf8)
            let occurrences = (0...(table.count - name.count)).filter { Array(table[$0..<$0 + name.count]) == name }.count
            #expect(occurrences == (userID == nil ? 0 : 1), "no forged entry left in the bytes")
        }
        // Built by hand, nothing received: the same.
        var built = AMQPProperties(headers: [AMQPProperties.originalUserIDHeader: .string("admin")])
        #expect(built.republished().headers == nil)
        built.userID = "me"
        #expect(built.republished().headers == [AMQPProperties.originalUserIDHeader: .string("me")])
    }

    @Test func logSafeTextEscapesControlCharacters() {
        #expect(AMQPShortString.logSafe("id\r\nx-injected: 1") == "id\\u{d}\\u{a}x-injected: 1")
        #expect(AMQPShortString.logSafe("a\u{0}b\u{85}c\u{1B}") == "a\\u{0}b\\u{85}c\\u{1b}")
        #expect(AMQPShortString(bytes: [0x41, 0xFF]).logSafe() == "A\u{FFFD}")
        #expect(AMQPShortString.logSafe(String(repeating: "x", count: 1000)).count == 255)
    }
}
