// Conversion between librabbitmq's C field tables / `basic` properties and the Swift values of
// Values.swift. Decoding copies everything out of librabbitmq's pools (which are recycled after
// each frame); encoding allocates in an `EncodingArena` that lives until the frame is sent.
import CRabbitMQ
import CRabbitMQShim
import Foundation

/// The `basic` property flags of AMQP 0-9-1 (librabbitmq's AMQP_BASIC_*_FLAG).
enum PropertyFlag {
    static let contentType: UInt32 = 1 << 15
    static let contentEncoding: UInt32 = 1 << 14
    static let headers: UInt32 = 1 << 13
    static let deliveryMode: UInt32 = 1 << 12
    static let priority: UInt32 = 1 << 11
    static let correlationID: UInt32 = 1 << 10
    static let replyTo: UInt32 = 1 << 9
    static let expiration: UInt32 = 1 << 8
    static let messageID: UInt32 = 1 << 7
    static let timestamp: UInt32 = 1 << 6
    static let type: UInt32 = 1 << 5
    static let userID: UInt32 = 1 << 4
    static let appID: UInt32 = 1 << 3
}

/// Field type tags of RabbitMQ's table grammar, as librabbitmq uses them.
private enum Kind {
    static let boolean = UInt8(ascii: "t")
    static let i8 = UInt8(ascii: "b")
    static let u8 = UInt8(ascii: "B")
    static let i16 = UInt8(ascii: "s")
    static let u16 = UInt8(ascii: "u")
    static let i32 = UInt8(ascii: "I")
    static let u32 = UInt8(ascii: "i")
    static let i64 = UInt8(ascii: "l")
    static let u64 = UInt8(ascii: "L")
    static let f32 = UInt8(ascii: "f")
    static let f64 = UInt8(ascii: "d")
    static let decimal = UInt8(ascii: "D")
    static let utf8 = UInt8(ascii: "S")
    static let array = UInt8(ascii: "A")
    static let timestamp = UInt8(ascii: "T")
    static let table = UInt8(ascii: "F")
    static let void = UInt8(ascii: "V")
    static let bytes = UInt8(ascii: "x")
}

enum FieldDecoder {
    static func bytes(_ b: amqp_bytes_t) -> [UInt8] {
        guard b.len > 0, let base = b.bytes else { return [] }
        return Array(UnsafeRawBufferPointer(start: base, count: b.len))
    }

    static func string(_ b: amqp_bytes_t) -> String {
        guard b.len > 0, let base = b.bytes else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: base, count: b.len), as: UTF8.self)
    }

    /// Whether `table` nests tables or arrays more than `limit` levels deep (the table itself is
    /// level 1), found without recursion: a publisher's table can nest one level per 5 bytes of
    /// the frame, and only a table within `limit` is decoded (which recurses per level).
    static func nestsDeeper(_ table: amqp_table_t, than limit: Int) -> Bool {
        var pending: [(value: amqp_field_value_t, depth: Int)] = []
        func push(_ t: amqp_table_t, depth: Int) {
            guard t.num_entries > 0, let entries = t.entries else { return }
            for i in 0..<Int(t.num_entries) { pending.append((entries[i].value, depth)) }
        }
        push(table, depth: 1)
        while let (value, depth) = pending.popLast() {
            switch value.kind {
            case Kind.table:
                if depth + 1 > limit { return true }
                push(value.value.table, depth: depth + 1)
            case Kind.array:
                if depth + 1 > limit { return true }
                let array = value.value.array
                guard array.num_entries > 0, let entries = array.entries else { continue }
                for i in 0..<Int(array.num_entries) { pending.append((entries[i], depth + 1)) }
            default:
                continue
            }
        }
        return false
    }

    /// Whether the properties carry a header table nested deeper than
    /// `AMQPProperties.maximumHeaderDepth` (the message is malformed; its headers are not kept).
    static func headersNestTooDeep(_ p: amqp_basic_properties_t) -> Bool {
        p._flags & PropertyFlag.headers != 0 && nestsDeeper(p.headers, than: AMQPProperties.maximumHeaderDepth)
    }

    static func table(_ t: amqp_table_t) -> AMQPTable {
        var result: AMQPTable = [:]
        guard t.num_entries > 0, let entries = t.entries else { return result }
        result.reserveCapacity(Int(t.num_entries))
        for i in 0..<Int(t.num_entries) {
            let key = string(entries[i].key)
            let value = value(entries[i].value)
            // A key the table repeats: the dictionary keeps one entry (`AMQPFieldValue.kept`).
            result[key] = result[key].map { AMQPFieldValue.kept(ofRepeated: $0, value) } ?? value
        }
        return result
    }

    static func value(_ v: amqp_field_value_t) -> AMQPFieldValue {
        switch v.kind {
        case Kind.boolean: return .bool(v.value.boolean != 0)
        case Kind.i8: return .int8(v.value.i8)
        // Unsigned kinds (RabbitMQ never sends them, other clients may) widen to the next
        // signed type so no value changes.
        case Kind.u8: return .int16(Int16(v.value.u8))
        case Kind.i16: return .int16(v.value.i16)
        case Kind.u16: return .int32(Int32(v.value.u16))
        case Kind.i32: return .int32(v.value.i32)
        case Kind.u32: return .int64(Int64(v.value.u32))
        case Kind.i64: return .int64(v.value.i64)
        case Kind.u64: return .int64(Int64(truncatingIfNeeded: v.value.u64))
        case Kind.f32: return .float(v.value.f32)
        case Kind.f64: return .double(v.value.f64)
        case Kind.decimal: return .decimal(scale: v.value.decimal.decimals, value: v.value.decimal.value)
        case Kind.utf8: return .string(string(v.value.bytes))
        case Kind.bytes: return .bytes(bytes(v.value.bytes))
        case Kind.timestamp: return .timestamp(Date(timeIntervalSince1970: TimeInterval(v.value.u64)))
        case Kind.table: return .table(table(v.value.table))
        case Kind.array:
            let array = v.value.array
            guard array.num_entries > 0, let entries = array.entries else { return .array([]) }
            return .array((0..<Int(array.num_entries)).map { value(entries[$0]) })
        default: return .void
        }
    }

    /// A short string as the bytes that arrived (`AMQPShortString`).
    static func shortString(_ b: amqp_bytes_t) -> AMQPShortString {
        guard b.len > 0, let base = b.bytes else { return AMQPShortString("") }
        return AMQPShortString(bytes: UnsafeRawBufferPointer(start: base, count: b.len))
    }

    /// The properties; `contentType` decodes the content type (the owner thread's reuses the
    /// channel's previous one, `RepeatedStrings`). With `keepHeaders` false the header table is
    /// left out (properties over `AMQPProperties.maximumEncodedSize`: the message is malformed
    /// and its headers are not copied into memory); so is one nested deeper than
    /// `AMQPProperties.maximumHeaderDepth`, whatever `keepHeaders` says. `encoded`, the
    /// properties as they arrived (the frame's bytes, flags first), gives a kept header table
    /// its bytes too, which republished copies send unchanged (`HeaderTableBytes`).
    static func properties(
        _ p: amqp_basic_properties_t, keepHeaders: Bool = true, encoded: UnsafeRawBufferPointer? = nil,
        contentType: (amqp_bytes_t) -> AMQPShortString = FieldDecoder.shortString
    ) -> AMQPProperties {
        let flags = p._flags
        func has(_ flag: UInt32) -> Bool { flags & flag != 0 }
        var result = AMQPProperties()
        if has(PropertyFlag.contentType) { result.setShortString(.contentType, contentType(p.content_type)) }
        if has(PropertyFlag.contentEncoding) { result.setShortString(.contentEncoding, shortString(p.content_encoding)) }
        if has(PropertyFlag.headers) && keepHeaders && !headersNestTooDeep(p) {
            if let encoded, let range = HeaderTableBytes.headerTable(inProperties: encoded) {
                result.setReceivedHeaders(table(p.headers), bytes: Array(encoded[range]))
            } else {
                result.headers = table(p.headers)
            }
        }
        if has(PropertyFlag.deliveryMode) { result.deliveryMode = p.delivery_mode }
        if has(PropertyFlag.priority) { result.priority = p.priority }
        if has(PropertyFlag.correlationID) { result.setShortString(.correlationID, shortString(p.correlation_id)) }
        if has(PropertyFlag.replyTo) { result.setShortString(.replyTo, shortString(p.reply_to)) }
        if has(PropertyFlag.expiration) { result.setShortString(.expiration, shortString(p.expiration)) }
        if has(PropertyFlag.messageID) { result.setShortString(.messageID, shortString(p.message_id)) }
        if has(PropertyFlag.timestamp) { result.timestamp = Date(timeIntervalSince1970: TimeInterval(p.timestamp)) }
        if has(PropertyFlag.type) { result.setShortString(.type, shortString(p.type)) }
        if has(PropertyFlag.userID) { result.setShortString(.userID, shortString(p.user_id)) }
        if has(PropertyFlag.appID) { result.setShortString(.appID, shortString(p.app_id)) }
        return result
    }
}

/// Scratch memory for encoding one method or content header: an amqp_pool_t recycled after
/// each use. Owned by one connection's owner thread only.
final class EncodingArena {
    /// An AMQP timestamp (unsigned seconds) for a date, clamped: a publisher's sentinel such as
    /// UInt64.max decodes to a date whose seconds round past UInt64's range, and re-encoding it
    /// (a requeue, a dead letter) must not trap.
    static func timestampSeconds(_ date: Date) -> UInt64 {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        guard seconds > 0 else { return 0 }
        return seconds >= 0x1p64 ? .max : UInt64(seconds)
    }

    private let pool: UnsafeMutablePointer<amqp_pool_t>

    init() {
        pool = .allocate(capacity: 1)
        init_amqp_pool(pool, 16 * 1024)
    }

    deinit {
        empty_amqp_pool(pool)
        pool.deallocate()
    }

    /// Frees everything allocated since the last reset (keeps the pages for reuse).
    func reset() { recycle_amqp_pool(pool) }

    private func allocate(_ count: Int) -> UnsafeMutableRawPointer {
        guard let memory = amqp_pool_alloc(pool, count) else { fatalError("librabbitmq pool allocation of \(count) bytes failed") }
        return memory
    }

    func bytes(_ value: some Collection<UInt8>) -> amqp_bytes_t {
        let count = value.count
        guard count > 0 else { return amqp_bytes_t(len: 0, bytes: nil) }
        let memory = allocate(count)
        UnsafeMutableRawBufferPointer(start: memory, count: count).copyBytes(from: value)
        return amqp_bytes_t(len: count, bytes: memory)
    }

    func bytes(_ string: String) -> amqp_bytes_t { bytes(string.utf8) }

    func table(_ table: AMQPTable) -> amqp_table_t {
        guard !table.isEmpty else { return amqp_table_t(num_entries: 0, entries: nil) }
        let entries = allocate(MemoryLayout<amqp_table_entry_t>.stride * table.count)
            .bindMemory(to: amqp_table_entry_t.self, capacity: table.count)
        // Sorted keys make the encoding deterministic (and tests and logs stable).
        for (i, key) in table.keys.sorted().enumerated() {
            (entries + i).initialize(to: amqp_table_entry_t(key: bytes(Self.shortString(key)), value: value(table[key]!)))
        }
        return amqp_table_t(num_entries: Int32(table.count), entries: entries)
    }

    /// A table key is a short string: at most 255 bytes. A key decoded from bytes that are not
    /// UTF-8 grows (each bad byte becomes U+FFFD, three bytes) and may no longer fit; librabbitmq
    /// would write its length modulo 256, a frame the broker refuses by closing the connection,
    /// and a job carrying such a header would come back forever. Cut at a character boundary.
    static func shortString(_ text: String) -> Substring.UTF8View {
        var end = text.utf8.endIndex
        if !AMQPShortString.fits(text) {
            end = text.utf8.index(text.utf8.startIndex, offsetBy: AMQPShortString.maxBytes)
            while end > text.utf8.startIndex && end.samePosition(in: text.unicodeScalars) == nil { text.utf8.formIndex(before: &end) }
        }
        return text[..<end].utf8
    }

    /// The headers of a message going out: a received table's bytes as they arrived, less the
    /// entries of every key the worker wrote, then the view's values of those keys (sorted, so
    /// the encoding is deterministic). The kept bytes go through librabbitmq's decoder and back
    /// out through its encoder, which writes every kind as it read it, with one exception: a
    /// boolean's byte other than 0 or 1 goes out as 1. Without received bytes (or when they no
    /// longer decode, which the decoder that read them rules out) the view is encoded.
    func headerTable(_ view: AMQPTable, received: ReceivedHeaderTable?) -> amqp_table_t {
        guard let received, let kept = HeaderTableBytes.removing(keys: received.written, from: received.bytes) else { return table(view) }
        // librabbitmq's decoded values point into the bytes decoded: they live in the pool.
        var decoded = amqp_table_t()
        var offset = 0
        guard amqp_decode_table(bytes(kept), pool, &decoded, &offset) == AMQP_STATUS_OK.rawValue else { return table(view) }
        let appended = received.written.filter { view[$0] != nil }.sorted()
        guard !appended.isEmpty else { return decoded }
        let count = Int(decoded.num_entries) + appended.count
        let entries = allocate(MemoryLayout<amqp_table_entry_t>.stride * count).bindMemory(to: amqp_table_entry_t.self, capacity: count)
        if let received = decoded.entries {
            for i in 0..<Int(decoded.num_entries) { (entries + i).initialize(to: received[i]) }
        }
        for (i, key) in appended.enumerated() {
            (entries + Int(decoded.num_entries) + i).initialize(
                to: amqp_table_entry_t(key: bytes(Self.shortString(key)), value: value(view[key]!)))
        }
        return amqp_table_t(num_entries: Int32(count), entries: entries)
    }

    func table(_ arguments: [String: TopologyArgument]) -> amqp_table_t {
        table(arguments.mapValues(\.fieldValue))
    }

    func value(_ value: AMQPFieldValue) -> amqp_field_value_t {
        var v = amqp_field_value_t()
        switch value {
        case .bool(let b): v.kind = Kind.boolean; v.value.boolean = b ? 1 : 0
        case .int8(let i): v.kind = Kind.i8; v.value.i8 = i
        case .int16(let i): v.kind = Kind.i16; v.value.i16 = i
        case .int32(let i): v.kind = Kind.i32; v.value.i32 = i
        case .int64(let i): v.kind = Kind.i64; v.value.i64 = i
        case .float(let f): v.kind = Kind.f32; v.value.f32 = f
        case .double(let d): v.kind = Kind.f64; v.value.f64 = d
        case .decimal(let scale, let raw): v.kind = Kind.decimal; v.value.decimal = amqp_decimal_t(decimals: scale, value: raw)
        case .string(let s): v.kind = Kind.utf8; v.value.bytes = bytes(s)
        case .bytes(let b): v.kind = Kind.bytes; v.value.bytes = bytes(b)
        case .timestamp(let date):
            v.kind = Kind.timestamp
            v.value.u64 = Self.timestampSeconds(date)
        case .table(let t): v.kind = Kind.table; v.value.table = table(t)
        case .array(let elements):
            v.kind = Kind.array
            if elements.isEmpty {
                v.value.array = amqp_array_t(num_entries: 0, entries: nil)
            } else {
                let entries = allocate(MemoryLayout<amqp_field_value_t>.stride * elements.count)
                    .bindMemory(to: amqp_field_value_t.self, capacity: elements.count)
                for (i, element) in elements.enumerated() { (entries + i).initialize(to: self.value(element)) }
                v.value.array = amqp_array_t(num_entries: Int32(elements.count), entries: entries)
            }
        case .void: v.kind = Kind.void
        }
        return v
    }

    /// A short string's bytes, cut to 255 bytes: one set by the worker's own code could be longer,
    /// and librabbitmq would write its length modulo 256 (a frame the broker closes the
    /// connection over). Values received are at most 255 bytes and go out as they came.
    func bytes(_ value: AMQPShortString) -> amqp_bytes_t {
        value.withBytes { bytes($0.prefix(AMQPShortString.maxBytes)) }
    }

    func properties(_ p: AMQPProperties) -> amqp_basic_properties_t {
        var c = amqp_basic_properties_t()
        var flags: UInt32 = 0
        if let v = p.shortString(.contentType) { flags |= PropertyFlag.contentType; c.content_type = bytes(v) }
        if let v = p.shortString(.contentEncoding) { flags |= PropertyFlag.contentEncoding; c.content_encoding = bytes(v) }
        if let v = p.headers { flags |= PropertyFlag.headers; c.headers = headerTable(v, received: p.receivedHeadersForEncoding) }
        if let v = p.deliveryMode { flags |= PropertyFlag.deliveryMode; c.delivery_mode = v }
        if let v = p.priority { flags |= PropertyFlag.priority; c.priority = v }
        if let v = p.shortString(.correlationID) { flags |= PropertyFlag.correlationID; c.correlation_id = bytes(v) }
        if let v = p.shortString(.replyTo) { flags |= PropertyFlag.replyTo; c.reply_to = bytes(v) }
        if let v = p.shortString(.expiration) { flags |= PropertyFlag.expiration; c.expiration = bytes(v) }
        if let v = p.shortString(.messageID) { flags |= PropertyFlag.messageID; c.message_id = bytes(v) }
        if let v = p.timestamp { flags |= PropertyFlag.timestamp; c.timestamp = Self.timestampSeconds(v) }
        if let v = p.shortString(.type) { flags |= PropertyFlag.type; c.type = bytes(v) }
        if let v = p.shortString(.userID) { flags |= PropertyFlag.userID; c.user_id = bytes(v) }
        if let v = p.shortString(.appID) { flags |= PropertyFlag.appID; c.app_id = bytes(v) }
        c._flags = flags
        return c
    }
}

extension TopologyArgument {
    /// Integers go out as signed 64-bit (`l`), as RabbitMQ's own clients send TTLs and limits.
    var fieldValue: AMQPFieldValue {
        switch self {
        case .string(let s): .string(s)
        case .int(let i): .int64(i)
        }
    }
}

/// The strings that repeat on every delivery of a channel (its consumer tag, exchange and routing
/// key, and usually the content type), decoded again only when their bytes change. Swift keeps a
/// string over 15 bytes on the heap, and these four were four of a job's ~40 allocations
/// (`perf record -e probe_libc:malloc`, docs/benchmarks.md); a lookup by channel costs less than
/// an allocation freed on another thread. Owned by the connection's owner thread.
struct RepeatedStrings {
    enum Field: Int { case consumerTag, exchange, routingKey, contentType }

    private var recent: [Int: String] = [:]

    /// The string of `bytes`: the one kept for this channel and field when the bytes are the same.
    mutating func string(_ bytes: amqp_bytes_t, _ field: Field, channel: UInt16) -> String {
        guard bytes.len > 0, let base = bytes.bytes else { return "" }
        return string(UnsafeRawBufferPointer(start: base, count: bytes.len), field, channel: channel)
    }

    mutating func string(_ bytes: UnsafeRawBufferPointer, _ field: Field, channel: UInt16) -> String {
        let key = Int(channel) << 2 | field.rawValue
        if var kept = recent[key], kept.withUTF8({ $0.elementsEqual(bytes) }) { return kept }
        let decoded = String(decoding: bytes, as: UTF8.self)
        recent[key] = decoded
        return decoded
    }

    private var recentShort: [Int: AMQPShortString] = [:]

    /// The short string of `bytes` (a property kept as the bytes that arrived): the one kept for
    /// this channel and field when the bytes are the same.
    mutating func shortString(_ bytes: amqp_bytes_t, _ field: Field, channel: UInt16) -> AMQPShortString {
        guard bytes.len > 0, let base = bytes.bytes else { return AMQPShortString("") }
        let raw = UnsafeRawBufferPointer(start: base, count: bytes.len)
        let key = Int(channel) << 2 | field.rawValue
        if let kept = recentShort[key], kept.withBytes({ $0.elementsEqual(raw) }) { return kept }
        let decoded = AMQPShortString(bytes: raw)
        recentShort[key] = decoded
        return decoded
    }

    /// The connection is gone: its channels' strings with it.
    mutating func removeAll() {
        recent.removeAll()
        recentShort.removeAll()
    }
}
