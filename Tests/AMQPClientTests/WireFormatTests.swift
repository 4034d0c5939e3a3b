import AMQPClient
import Foundation
import Testing

/// What a publisher can put in a field table comes back out of AMQPClient intact enough to be
/// sent again (found by FuzzAMQPFields).
@Suite struct WireFormatTests {
    /// A key of 200 bytes that are not UTF-8 decodes to 600 bytes of U+FFFD; written back as it
    /// was, its length byte wrapped and the table (a dead letter's headers) no longer decoded.
    @Test func aKeyThatGrewPastAShortStringIsCutAndTheTableStillEncodes() throws {
        let key: [UInt8] = Array(repeating: 0xFF, count: 200)
        var entry: [UInt8] = [UInt8(key.count)] + key + [UInt8(ascii: "I"), 0, 0, 0, 7]
        entry += [3] + Array("abc".utf8) + [UInt8(ascii: "S"), 0, 0, 0, 1, UInt8(ascii: "x")]
        let wire = withUnsafeBytes(of: UInt32(entry.count).bigEndian, Array.init) + entry
        let table = try #require(AMQPWireFormat.decodeTable(wire))
        #expect(table.keys.contains { $0.utf8.count > 255 })
        let encoded = try #require(AMQPWireFormat.encodeTable(table))
        let again = try #require(AMQPWireFormat.decodeTable(encoded), "the re-encoded table decodes")
        #expect(again["abc"] == .string("x"))
        #expect(again.keys.allSatisfy { $0.utf8.count <= 255 })
        #expect(again.values.contains(.int32(7)))
    }

    /// 300 entries of an 11-byte key and an int32 put a kind byte at offset 4096, where the
    /// first buffer of the old encoder ended: librabbitmq calls that bad data, not too small,
    /// and the table was reported unencodable (found by both fuzz targets).
    @Test func aTableWhoseKindByteFallsOnA4KiBBoundaryEncodes() throws {
        var table: AMQPTable = [:]
        for i in 0..<300 { table["key-" + String(format: "%07d", i)] = .int32(Int32(i)) }
        let encoded = try #require(AMQPWireFormat.encodeTable(table))
        #expect(encoded.count == 4 + 300 * 17)
        #expect(AMQPWireFormat.decodeTable(encoded) == table)
    }

    @Test func aTableOfEveryKindRoundTrips() throws {
        let table: AMQPTable = [
            "x-apns-attempt": .int32(3), "s": .string("é"), "l": .int64(.max), "t": .bool(true), "d": .double(1.5),
            "nested": .table(["a": .array([.int8(-1), .void, .bytes([0, 1])])]),
        ]
        let encoded = try #require(AMQPWireFormat.encodeTable(table))
        #expect(AMQPWireFormat.decodeTable(encoded) == table)
        #expect(AMQPWireFormat.decodeTable([0, 0, 0, 9, 1]) == nil, "a table longer than its bytes is refused")
    }
    /// A header table nested deeper than `AMQPProperties.maximumHeaderDepth` is not kept: Swift
    /// decodes, re-encodes, compares and frees tables recursively, and a publisher's frame could
    /// nest ~20,000 levels. The table itself is level 1; arrays count as levels too.
    @Test func aHeaderTableNestedDeeperThanTheBoundIsNotKept() throws {
        func nested(_ depth: Int, array: Bool = false) -> AMQPTable {
            var value: AMQPFieldValue = .int8(1)
            for _ in 1..<depth { value = array ? .array([value]) : .table(["n": value]) }
            return ["n": value]
        }
        for (depth, array) in [(32, false), (33, false), (32, true), (33, true)] {
            var properties = AMQPProperties.persistentJSON
            properties.headers = nested(depth, array: array)
            properties.messageID = "m"
            let wire = try #require(AMQPWireFormat.encodeProperties(properties))
            let decoded = try #require(AMQPWireFormat.decodeProperties(wire))
            #expect(decoded.messageID == "m", "depth \(depth)")
            let kept = depth <= AMQPProperties.maximumHeaderDepth
            #expect(decoded.headers == (kept ? properties.headers : nil), "depth \(depth), arrays: \(array)")
            let table = try #require(AMQPWireFormat.encodeTable(nested(depth, array: array)))
            #expect((AMQPWireFormat.decodeTable(table) != nil) == kept, "depth \(depth), arrays: \(array)")
        }
    }
}
