import CRabbitMQ
import CRabbitMQShim

/// The AMQP wire encodings a consumer decodes from whoever published: a field table, and the
/// properties of a `basic` content header. Decoded exactly as deliveries are (librabbitmq's
/// decoder, then `FieldDecoder`), encoded as publishes are (`EncodingArena`, then
/// librabbitmq's encoder). For the fuzz targets in Fuzz/ and for tests; the connection does not
/// go through here.
public enum AMQPWireFormat {
    /// A field table (its 4-byte length first), or nil when librabbitmq refuses the bytes or it
    /// nests deeper than `AMQPProperties.maximumHeaderDepth`.
    public static func decodeTable(_ bytes: [UInt8]) -> AMQPTable? {
        withPool { pool in
            var mutable = bytes
            return mutable.withUnsafeMutableBytes { raw -> AMQPTable? in
                var table = amqp_table_t()
                var offset = 0
                let encoded = amqp_bytes_t(len: raw.count, bytes: raw.baseAddress)
                guard amqp_decode_table(encoded, pool, &table, &offset) == AMQP_STATUS_OK.rawValue,
                    !FieldDecoder.nestsDeeper(table, than: AMQPProperties.maximumHeaderDepth)
                else { return nil }
                return FieldDecoder.table(table)
            }
        }
    }

    /// The properties of a `basic` content header (flags first), or nil when librabbitmq refuses them.
    public static func decodeProperties(_ bytes: [UInt8]) -> AMQPProperties? {
        withPool { pool in
            var mutable = bytes
            return mutable.withUnsafeMutableBytes { raw -> AMQPProperties? in
                var decoded: UnsafeMutableRawPointer?
                let encoded = amqp_bytes_t(len: raw.count, bytes: raw.baseAddress)
                guard amqp_decode_properties(UInt16(AMQP_BASIC_CLASS), pool, encoded, &decoded) == AMQP_STATUS_OK.rawValue,
                    let decoded
                else { return nil }
                return FieldDecoder.properties(
                    decoded.assumingMemoryBound(to: amqp_basic_properties_t.self).pointee, encoded: UnsafeRawBufferPointer(raw))
            }
        }
    }

    /// The properties of a `basic` content header on the wire (flags first), or nil when they do
    /// not fit `limit` bytes or librabbitmq refuses them.
    public static func encodeProperties(_ properties: AMQPProperties, limit: Int = 1 << 20) -> [UInt8]? {
        let arena = EncodingArena()
        var input = arena.properties(properties)
        var buffer = [UInt8](repeating: 0, count: limit)
        let written = buffer.withUnsafeMutableBytes { raw in
            amqp_encode_properties(UInt16(AMQP_BASIC_CLASS), &input, amqp_bytes_t(len: raw.count, bytes: raw.baseAddress))
        }
        guard written >= 0 else { return nil }
        return Array(buffer.prefix(Int(written)))
    }

    /// A field table on the wire (its 4-byte length first), or nil when it does not fit one
    /// (a table is at most 2^32−1 bytes; librabbitmq refuses some values, such as a kind it does not know).
    public static func encodeTable(_ table: AMQPTable) -> [UInt8]? {
        let arena = EncodingArena()
        var input = arena.table(table)
        // Room for the whole encoding at once: librabbitmq reports a buffer that ends at a
        // field's kind byte as bad data, not as too small, so growing on TABLE_TOO_BIG alone
        // would call a good table unencodable.
        var buffer = [UInt8](repeating: 0, count: encodedSizeBound(.table(table)))
        var offset = 0
        let status = buffer.withUnsafeMutableBytes { raw in
            amqp_encode_table(amqp_bytes_t(len: raw.count, bytes: raw.baseAddress), &input, &offset)
        }
        guard status == AMQP_STATUS_OK.rawValue else { return nil }
        return Array(buffer.prefix(offset))
    }

    /// At least the bytes `value` takes on the wire with its kind byte (keys cut to 255 bytes).
    private static func encodedSizeBound(_ value: AMQPFieldValue) -> Int {
        switch value {
        case .string(let s): return 5 + s.utf8.count
        case .bytes(let b): return 5 + b.count
        case .table(let t): return 5 + t.reduce(0) { $0 + 1 + min($1.key.utf8.count, 255) + encodedSizeBound($1.value) }
        case .array(let a): return 5 + a.reduce(0) { $0 + encodedSizeBound($1) }
        case .bool, .int8, .int16, .int32, .int64, .float, .double, .decimal, .timestamp, .void: return 9
        }
    }

    private static func withPool<T>(_ body: (UnsafeMutablePointer<amqp_pool_t>) -> T) -> T {
        let pool = UnsafeMutablePointer<amqp_pool_t>.allocate(capacity: 1)
        init_amqp_pool(pool, 4096)
        defer {
            empty_amqp_pool(pool)
            pool.deallocate()
        }
        return body(pool)
    }
}
