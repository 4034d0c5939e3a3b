import AMQPClient
import APNSTopologyNames
import APNSTopology
import Foundation
import Testing

/// Contract §4, "byte for byte", for header tables, without a broker: a received table survives a
/// republished copy (retry, dead letter, held, requeue) as the bytes that arrived, whatever a
/// dictionary would have made of it, and the worker's own headers follow it, each replacing
/// every received entry of its key.
@Suite struct HeaderTableBytesTests {
    /// One table entry on the wire: a short-string key, a kind byte, the value's bytes.
    static func entry(_ key: [UInt8], _ kind: Character, _ value: [UInt8]) -> [UInt8] {
        [UInt8(key.count)] + key + [UInt8(ascii: kind.unicodeScalars.first!)] + value
    }

    static func entry(_ key: String, _ kind: Character, _ value: [UInt8]) -> [UInt8] { entry(Array(key.utf8), kind, value) }

    static func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.bigEndian, Array.init) }

    /// A length-prefixed value (`S`, `x`, `F`, `A`).
    static func long(_ bytes: [UInt8]) -> [UInt8] { bigEndian(UInt32(bytes.count)) + bytes }

    /// A whole table: its 4-byte length, then the entries.
    static func table(_ entries: [[UInt8]]) -> [UInt8] { long(entries.flatMap { $0 }) }

    /// Everything a dictionary loses: keys out of order, a key twice, unsigned kinds, 2^64−1,
    /// an `S` that is not UTF-8, a table nested with an array, a NaN.
    static let hostileEntries: [[UInt8]] = [
        entry("zeta", "S", long(Array("last first".utf8))),
        entry("dup", "I", bigEndian(Int32(1))),
        entry("u8", "B", [200]),
        entry("u16", "u", bigEndian(UInt16(60_000))),
        entry("u32", "i", bigEndian(UInt32(4_000_000_000))),
        entry("u64", "L", bigEndian(UInt64.max)),
        entry("not-utf8", "S", long([0xFF, 0xFE, 0x41, 0xC3])),
        entry("nested", "F", table([entry("inner", "A", long([UInt8(ascii: "B"), 7, UInt8(ascii: "S")] + long([0x80]))), entry("t", "F", table([]))])),
        entry("nan", "d", bigEndian(Double.nan.bitPattern | 0x1234)),
        entry("dup", "S", long(Array("second".utf8))),
        entry("alpha", "V", []),
    ]

    /// FuzzAMQPFields' input (selector byte, then the property list), base64.
    static let continuedFlagWordsInput: String = [
        "AbgBAce4////////////////////////////////////////////////////////////////////////////////////////",
        "//////8AAAEAAAAAAP//////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "//////////////////////////////////9oQQAAAHtGAAAAdgVjb3VudGwAAAAAAAAAAwZyZWF2b25TAAAACHJlagIAADA5",
        "AVNTAAAABcOnPw0KAXh4AAAAAv/+AVNU//8AQMOnAA0KAXh4AAAAAv/+e0YAAAB2BWNvdW50bAAAAAAAACADBi1kZWF0aEEA",
        "AAB7RgAAAHYFAA0KAXh4AAAAAv/+e0YAAAB2BWNvAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAP//////////////////////////////////////////////////////////",
        "/////////////////////////////////////////////////////////////////////////wAA////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////3///////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "////////////////////////////////////////////////////////////////////////////////////////////////",
        "//////////////////////8=",
    ].joined()

    /// A property list with further flag words (bit 0 of the first): `basic` never needs one,
    /// and librabbitmq folds the further words into the flags it decodes with, so the table it
    /// reads is not where the first word says. FuzzAMQPFields' input (CI, session 44): the
    /// table was kept as 4 empty bytes while librabbitmq decoded one entry, and a copy with a
    /// header written lost that entry. No bytes are kept now: a copy carries the decoded view.
    @Test func aPropertyListWithFurtherFlagWordsKeepsNoTableBytes() throws {
        let input = try #require(Data(base64Encoded: Self.continuedFlagWordsInput))
        let properties = try #require(AMQPWireFormat.decodeProperties(Array(input.dropFirst())))
        #expect(properties.receivedHeaderTable == nil)
        let view = try #require(properties.headers)
        #expect(view.count == 1)
        var headers = view
        headers["x-apns-reason"] = .string("written")
        var copy = properties
        copy.setHeaders(headers, writing: ["x-apns-reason"])
        let again = try #require(AMQPWireFormat.encodeProperties(copy).flatMap { AMQPWireFormat.decodeProperties($0) })
        #expect(again.headers?.count == 2 && again.headers?["x-apns-reason"] == .string("written"))
        // The rule alone: a continuation bit in the first flag word keeps no table.
        let continued: [UInt8] = [0x20, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00]
        #expect(continued.withUnsafeBytes { HeaderTableBytes.headerTable(inProperties: $0) } == nil)
    }

    /// Properties on the wire (flags first): content type, the header table, delivery mode 2.
    static func wireProperties(headers: [UInt8]) -> [UInt8] {
        let flags: UInt16 = 1 << 15 | 1 << 13 | 1 << 12
        return bigEndian(flags) + [16] + Array("application/json".utf8) + headers + [2]
    }

    /// The header table of encoded properties, and its entries as (key, entry bytes), parsed
    /// here independently of `HeaderTableBytes`.
    static func headerEntries(ofProperties wire: [UInt8]) throws -> (table: [UInt8], entries: [(key: String, bytes: [UInt8])]) {
        let range = try #require(wire.withUnsafeBytes { HeaderTableBytes.headerTable(inProperties: $0) })
        let table = Array(wire[range])
        let body = Array(table.dropFirst(4))
        var entries: [(String, [UInt8])] = []
        var offset = 0
        while offset < body.count {
            let keyLength = Int(body[offset])
            let key = String(decoding: body[offset + 1..<offset + 1 + keyLength], as: UTF8.self)
            let kind = offset + 1 + keyLength
            var length = 1 + keyLength + 1
            switch Character(UnicodeScalar(body[kind])) {
            case "t", "b", "B": length += 1
            case "s", "u": length += 2
            case "I", "i", "f": length += 4
            case "D": length += 5
            case "l", "L", "d", "T": length += 8
            case "V": break
            default: length += 4 + Int(body[kind + 1..<kind + 5].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
            }
            entries.append((key, Array(body[offset..<offset + length])))
            offset += length
        }
        return (table, entries)
    }

    @Test func aReceivedTableIsKeptAsItsBytes() throws {
        let table = Self.table(Self.hostileEntries)
        let properties = try #require(AMQPWireFormat.decodeProperties(Self.wireProperties(headers: table)))
        #expect(properties.receivedHeaderTable == table)
        // The view: of a key's entries the largest count, or a count over a value that is none
        // (contract §4: a repeated header counts as the largest of its values), else the last;
        // unsigned kinds widened.
        #expect(properties.headers?["dup"] == .int32(1))
        #expect(properties.headers?["u8"] == .int16(200))
    }

    /// A copy with no header of the worker's own: the same bytes.
    @Test func anUntouchedTableIsEncodedAgainByteForByte() throws {
        let wire = Self.wireProperties(headers: Self.table(Self.hostileEntries))
        let properties = try #require(AMQPWireFormat.decodeProperties(wire))
        #expect(AMQPWireFormat.encodeProperties(properties) == wire)
    }

    /// Retry, dead letter, held, requeue: the received entries byte for byte and in their
    /// order, then the worker's, each once.
    @Test func aRepublishedCopyKeepsTheReceivedEntriesAndAppendsOurs() throws {
        let received = try #require(AMQPWireFormat.decodeProperties(Self.wireProperties(headers: Self.table(Self.hostileEntries))))
        var copy = received.republished()
        var envelope = JobEnvelope(copy.headers)
        envelope.forward()
        envelope.record(.init(reason: "MalformedJob", status: 0, attempts: 2, failedAt: Date(timeIntervalSince1970: 0), error: "bad"))
        envelope.setAttempt(2)
        copy.setHeaders(envelope)

        let wire = try #require(AMQPWireFormat.encodeProperties(copy))
        let (table, entries) = try Self.headerEntries(ofProperties: wire)
        let receivedEntries = Self.hostileEntries.flatMap { $0 }
        #expect(Array(table.dropFirst(4).prefix(receivedEntries.count)) == receivedEntries, "the received entries first, unchanged")
        let ours = entries.dropFirst(Self.hostileEntries.count).map(\.key)
        #expect(ours == [JobHeaders.attempt, JobHeaders.attempts, JobHeaders.error, JobHeaders.failedAt, JobHeaders.reason, JobHeaders.status])
        let decoded = try #require(AMQPWireFormat.decodeProperties(wire))
        #expect(decoded.headers?[JobHeaders.reason] == .string("MalformedJob"))
        #expect(decoded.headers?[JobHeaders.attempt] == .int32(2))
    }

    /// A publisher's x-apns-reason (twice, the second equal to what the worker writes) and
    /// x-apns-user-id are replaced, not duplicated: a copy carries one value of each of our
    /// keys, and every other entry as it came.
    @Test func aForgedHeaderOfOursIsReplacedNotDuplicated() throws {
        let forged = [
            Self.entry(JobHeaders.reason, "S", Self.long(Array("Forged".utf8))),
            Self.entry("keep", "b", [0x80]),
            Self.entry(JobHeaders.reason, "S", Self.long(Array("MalformedJob".utf8))),
            Self.entry(AMQPProperties.originalUserIDHeader, "S", Self.long(Array("someone-else".utf8))),
            Self.entry(JobHeaders.attempt, "i", Self.bigEndian(UInt32(7))),
        ]
        var wire = Self.wireProperties(headers: Self.table(forged))
        // user_id (flag 1 << 4) after the delivery mode: "sync".
        wire[1] |= 1 << 4
        wire += [4] + Array("sync".utf8)
        let received = try #require(AMQPWireFormat.decodeProperties(wire))
        #expect(received.userID == "sync")
        var copy = received.republished()
        var envelope = JobEnvelope(copy.headers)
        envelope.record(.init(reason: "MalformedJob", status: 0, attempts: 7, failedAt: Date(timeIntervalSince1970: 0), error: "bad"))
        copy.setHeaders(envelope)

        let out = try #require(AMQPWireFormat.encodeProperties(copy))
        let (_, entries) = try Self.headerEntries(ofProperties: out)
        #expect(entries.filter { $0.key == JobHeaders.reason }.count == 1)
        #expect(entries.filter { $0.key == AMQPProperties.originalUserIDHeader }.count == 1)
        #expect(entries.map(\.bytes).prefix(2) == [forged[1], forged[4]], "the publisher's other entries first, unchanged")
        let decoded = try #require(AMQPWireFormat.decodeProperties(out))
        #expect(decoded.headers?[JobHeaders.reason] == .string("MalformedJob"))
        #expect(decoded.headers?[AMQPProperties.originalUserIDHeader] == .string("sync"))
        #expect(decoded.headers?[JobHeaders.attempt] == .int64(7), "x-apns-attempt not written here: the publisher's u32, as sent")
    }

    /// An operator's requeue drops the failure headers: every received entry of them goes.
    @Test func aRequeueDropsEveryReceivedEntryOfTheClearedHeaders() throws {
        let entries = [
            Self.entry(JobHeaders.reason, "S", Self.long(Array("BadDeviceToken".utf8))),
            Self.entry("x-custom", "u", Self.bigEndian(UInt16(9))),
            Self.entry(JobHeaders.attempt, "I", Self.bigEndian(Int32(3))),
            Self.entry(JobHeaders.attempt, "I", Self.bigEndian(Int32(4))),
        ]
        let received = try #require(AMQPWireFormat.decodeProperties(Self.wireProperties(headers: Self.table(entries))))
        var copy = received.republished()
        var envelope = JobEnvelope(copy.headers)
        envelope.requeue()
        copy.setHeaders(envelope)
        let out = try #require(AMQPWireFormat.encodeProperties(copy))
        let (_, kept) = try Self.headerEntries(ofProperties: out)
        #expect(kept.map(\.bytes) == [entries[1], Self.entry(JobHeaders.lastReason, "S", Self.long(Array("BadDeviceToken".utf8)))])
    }

    /// A header changed or removed through the plain `headers` setter replaces its entries too.
    @Test func theHeadersSetterMarksWhatItChanges() throws {
        let entries = [Self.entry("a", "B", [1]), Self.entry("b", "B", [2]), Self.entry("c", "B", [3])]
        var properties = try #require(AMQPWireFormat.decodeProperties(Self.wireProperties(headers: Self.table(entries))))
        var headers = try #require(properties.headers)
        headers["a"] = nil
        headers["c"] = .int8(4)
        properties.headers = headers
        let out = try #require(AMQPWireFormat.encodeProperties(properties))
        let (_, kept) = try Self.headerEntries(ofProperties: out)
        #expect(kept.map(\.bytes) == [entries[1], Self.entry("c", "b", [4])])
    }

    /// The table's bytes are not compared: two deliveries of one message whose table the broker
    /// re-encoded are equal (`AckedMessages` recognises a handed-back message by equality).
    @Test func equalityComparesTheDecodedView() throws {
        let a = try #require(AMQPWireFormat.decodeProperties(Self.wireProperties(headers: Self.table([Self.entry("n", "B", [1])]))))
        let b = try #require(AMQPWireFormat.decodeProperties(Self.wireProperties(headers: Self.table([Self.entry("n", "s", Self.bigEndian(Int16(1)))]))))
        #expect(a.receivedHeaderTable != b.receivedHeaderTable)
        #expect(a == b)
        #expect(a.hashValue == b.hashValue)
    }

    /// librabbitmq encodes a boolean from its truth value: the one kind that does not go out as
    /// it came (a byte other than 0 or 1 becomes 1). Stated here so a change shows.
    @Test func aBooleanByteOtherThanZeroOrOneGoesOutAsOne() throws {
        let received = try #require(AMQPWireFormat.decodeProperties(Self.wireProperties(headers: Self.table([Self.entry("flag", "t", [2])]))))
        let out = try #require(AMQPWireFormat.encodeProperties(received))
        #expect(out == Self.wireProperties(headers: Self.table([Self.entry("flag", "t", [1])])))
    }

    @Test func removingWalksEntriesAndRefusesWhatIsNotATable() throws {
        let table = Self.table(Self.hostileEntries)
        let withoutDup = try #require(HeaderTableBytes.removing(keys: ["dup"], from: table))
        #expect(withoutDup == Self.table(Self.hostileEntries.enumerated().filter { $0.offset != 1 && $0.offset != 9 }.map(\.element)))
        #expect(HeaderTableBytes.removing(keys: ["dup"], from: Array(table.dropLast())) == nil, "cut short")
        #expect(HeaderTableBytes.removing(keys: [], from: Self.table([Self.entry("k", "Z", [])])) == nil, "unknown kind")
        #expect(HeaderTableBytes.removing(keys: [], from: [0, 0, 0, 1]) == nil, "length beyond the bytes")
        // A key that is not UTF-8 is named as the view names it, with U+FFFD.
        let odd = Self.table([Self.entry([0x61, 0xFF], "B", [1]), Self.entry("b", "B", [2])])
        #expect(HeaderTableBytes.removing(keys: ["a\u{FFFD}"], from: odd) == Self.table([Self.entry("b", "B", [2])]))
    }

    /// Setting a table given as bytes (a publisher's hostile table): kept as given.
    @Test func setHeaderTableKeepsTheBytesGiven() throws {
        var properties = AMQPProperties.persistentJSON
        let table = Self.table(Self.hostileEntries)
        let set = properties.setHeaderTable(bytes: table)
        #expect(set)
        #expect(properties.receivedHeaderTable == table)
        #expect(properties.headers?["u64"] == .int64(-1), "the view: u64 cut to i64, as before")
        let wire = try #require(AMQPWireFormat.encodeProperties(properties))
        #expect(try Self.headerEntries(ofProperties: wire).table == table)
        let refused = !properties.setHeaderTable(bytes: [0, 0, 0, 2, 1])
        #expect(refused, "not a table")
        #expect(properties.receivedHeaderTable == table, "nothing changed")
    }
}
