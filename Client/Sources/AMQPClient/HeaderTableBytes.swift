/// A header table as the bytes that arrived, walked entry by entry without decoding any value.
///
/// The worker republishes a message it received (a retry, a dead letter, a held or requeued job)
/// with its header table byte for byte (contract §4): entry order, duplicate keys, unsigned and
/// 64-bit kinds and `S` values that are not UTF-8 all survive, which a decoded dictionary cannot
/// promise. The worker's own headers replace every entry of their key: those entries are cut out
/// here, the others' bytes copied unchanged. Pure, no allocation but the result; fuzzed by
/// FuzzAMQPFields.
public enum HeaderTableBytes {
    /// The kinds of RabbitMQ's table grammar as librabbitmq 0.11 reads them: the bytes each value
    /// takes after its kind byte, the length-prefixed ones counted from their 4-byte length.
    private static func valueLength(kind: UInt8, _ bytes: UnsafeRawBufferPointer, at offset: Int) -> Int? {
        switch kind {
        case UInt8(ascii: "t"), UInt8(ascii: "b"), UInt8(ascii: "B"): return 1
        case UInt8(ascii: "s"), UInt8(ascii: "u"): return 2
        case UInt8(ascii: "I"), UInt8(ascii: "i"), UInt8(ascii: "f"): return 4
        case UInt8(ascii: "D"): return 5
        case UInt8(ascii: "l"), UInt8(ascii: "L"), UInt8(ascii: "d"), UInt8(ascii: "T"): return 8
        case UInt8(ascii: "V"): return 0
        case UInt8(ascii: "S"), UInt8(ascii: "x"), UInt8(ascii: "F"), UInt8(ascii: "A"):
            guard let length = uint32(bytes, at: offset) else { return nil }
            return 4 + Int(length)
        default: return nil
        }
    }

    private static func uint32(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt32? {
        guard offset >= 0, offset + 4 <= bytes.count else { return nil }
        return bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// Calls `body` with each entry of a table's entries (the bytes after its 4-byte length):
    /// the key's bytes and the range the whole entry (key, kind, value) takes. False when the
    /// bytes are not a sequence of well-formed entries (`body` may have been called for some).
    static func forEachEntry(
        _ entries: UnsafeRawBufferPointer, _ body: (_ key: UnsafeRawBufferPointer, _ entry: Range<Int>) -> Void
    ) -> Bool {
        var offset = 0
        while offset < entries.count {
            let start = offset
            let keyLength = Int(entries[offset])
            let kindOffset = offset + 1 + keyLength
            guard kindOffset < entries.count,
                let length = valueLength(kind: entries[kindOffset], entries, at: kindOffset + 1),
                kindOffset + 1 + length <= entries.count
            else { return false }
            offset = kindOffset + 1 + length
            body(UnsafeRawBufferPointer(rebasing: entries[start + 1..<kindOffset]), start..<offset)
        }
        return true
    }

    /// A whole table (its 4-byte length first) less every entry whose key is in `keys`, the
    /// other entries' bytes unchanged and in their order; nil when `table` is not a well-formed
    /// table. A key that is not UTF-8 matches the text it decodes to with U+FFFD, as the
    /// decoded view (`AMQPTable`) names it.
    public static func removing(keys: Set<String>, from table: [UInt8]) -> [UInt8]? {
        table.withUnsafeBytes { raw -> [UInt8]? in
            guard let length = uint32(raw, at: 0), Int(length) == raw.count - 4 else { return nil }
            let entries = UnsafeRawBufferPointer(rebasing: raw[4...])
            if keys.isEmpty { return forEachEntry(entries) { _, _ in } ? table : nil }
            var kept: [UInt8] = [0, 0, 0, 0]
            kept.reserveCapacity(raw.count)
            let wellFormed = forEachEntry(entries) { key, entry in
                guard !matches(key, keys) else { return }
                kept.append(contentsOf: UnsafeRawBufferPointer(rebasing: entries[entry]))
            }
            guard wellFormed else { return nil }
            let count = UInt32(kept.count - 4)
            for i in 0..<4 { kept[i] = UInt8(truncatingIfNeeded: count >> (24 - 8 * i)) }
            return kept
        }
    }

    private static func matches(_ key: UnsafeRawBufferPointer, _ keys: Set<String>) -> Bool {
        // Most keys are ASCII and most sets hold a few keys: compared without making a String.
        if key.allSatisfy({ $0 < 0x80 }) {
            return keys.contains { $0.utf8.elementsEqual(key) }
        }
        return keys.contains(String(decoding: key, as: UTF8.self))
    }

    /// The header table within a `basic` content header's encoded properties (property flags
    /// first, as the frame carries them): its range, 4-byte length included; nil when the
    /// properties carry none or their bytes are cut short.
    public static func headerTable(inProperties properties: UnsafeRawBufferPointer) -> Range<Int>? {
        guard properties.count >= 2 else { return nil }
        let flags = UInt16(properties[0]) << 8 | UInt16(properties[1])
        var offset = 2
        // Bit 0 says another flag word follows: never for `basic`, whose flags fit one word, so
        // only a hostile publisher sends it. librabbitmq ORs further words into the flags it
        // decodes with (shifted by 16 per word, the shift wrapping past 32 bits), so the fields
        // it reads, and where the table starts, are not what the first word says (FuzzAMQPFields
        // found a table kept as 4 empty bytes while librabbitmq decoded an entry from it). No
        // bytes are kept then: the view librabbitmq decoded is what a copy carries.
        guard flags & 1 == 0 else { return nil }
        guard UInt32(flags) & PropertyFlag.headers != 0 else { return nil }
        // content_type and content_encoding come first, each a short string.
        if UInt32(flags) & PropertyFlag.contentType != 0 {
            guard offset < properties.count else { return nil }
            offset += 1 + Int(properties[offset])
        }
        if UInt32(flags) & PropertyFlag.contentEncoding != 0 {
            guard offset < properties.count else { return nil }
            offset += 1 + Int(properties[offset])
        }
        guard let length = uint32(properties, at: offset), offset + 4 + Int(length) <= properties.count else { return nil }
        return offset..<offset + 4 + Int(length)
    }
}

/// A received header table's bytes (4-byte length first) and the keys the worker has written
/// on this copy since (set, changed or removed in the decoded view): on the wire, each of those
/// replaces every received entry of its key (`EncodingArena.headerTable`). Kept in the
/// properties as `@NotCompared`, so never compared or hashed.
struct ReceivedHeaderTable: Sendable {
    let bytes: [UInt8]
    var written: Set<String> = []

    /// Notes the keys whose value differs between two views of the headers.
    mutating func noteChanges(from old: AMQPTable?, to new: AMQPTable?) {
        let old = old ?? [:], new = new ?? [:]
        for (key, value) in old where !(new[key].map { Self.identical($0, value) } ?? false) { written.insert(key) }
        for key in new.keys where old[key] == nil { written.insert(key) }
    }

    /// Equal values, floating-point ones bit for bit (a NaN a publisher sent is not a change).
    /// Recurses once per level of nesting: views are at most `AMQPProperties.maximumHeaderDepth` deep.
    static func identical(_ a: AMQPFieldValue, _ b: AMQPFieldValue) -> Bool {
        switch (a, b) {
        case (.float(let x), .float(let y)): return x.bitPattern == y.bitPattern
        case (.double(let x), .double(let y)): return x.bitPattern == y.bitPattern
        case (.table(let x), .table(let y)):
            return x.count == y.count && x.allSatisfy { key, value in y[key].map { identical(value, $0) } ?? false }
        case (.array(let x), .array(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { identical($0, $1) }
        default: return a == b
        }
    }
}

/// A stored property left out of its type's synthesized `==` and `hash(into:)`: the received
/// table's bytes ride along with properties that compare by their decoded view, whether the
/// table was kept (received) or not (built by hand), and two deliveries of one message are the
/// same message even when the broker re-encoded their table (a quorum queue adding
/// `x-delivery-count`), as `AckedMessages` needs.
@propertyWrapper
struct NotCompared<Value: Sendable>: Sendable, Hashable {
    var wrappedValue: Value

    static func == (_: NotCompared, _: NotCompared) -> Bool { true }
    func hash(into hasher: inout Hasher) {}
}
