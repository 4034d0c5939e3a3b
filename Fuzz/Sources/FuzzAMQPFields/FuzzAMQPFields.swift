// libFuzzer target: AMQP field tables and `basic` properties as AMQPClient decodes a delivery's
// (librabbitmq's decoder, then the Swift values). The first byte picks what the rest is: a
// field table (its 4-byte length first) or a content header's property list (flags first).
// A decoded table must encode again and decode to the same values: what the worker forwards
// (a retry, a dead letter) is what it read. On the bytes: a table once through AMQPClient is a
// fixed point (decode, encode: the same bytes), and properties come out byte for byte as they
// went in (short strings kept as the bytes that arrived, contract §4), their header table too:
// it is kept as its bytes (`HeaderTableBytes`), and a copy the worker writes a header on keeps
// every other entry's bytes and carries that header once.
import AMQPClient
import Foundation
import FuzzDriver

@_cdecl("FuzzAMQPFields_main")
public func fuzzAMQPFieldsMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzAMQPFields(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzAMQPFields(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAMQPFields(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    if data[0] & 1 == 0 {
        guard let table = AMQPWireFormat.decodeTable(bytes) else { return 0 }
        checkRoundTrip(table)
        checkFixedPoint(table)
        checkWalkerAgrees(bytes)
    } else {
        guard let properties = AMQPWireFormat.decodeProperties(bytes) else { return 0 }
        if let headers = properties.headers { checkRoundTrip(headers) }
        checkPropertyBytes(properties)
        checkHeaderTableBytes(properties)
    }
    return 0
}

/// Encoded once, a table decodes and encodes to the same bytes.
private func checkFixedPoint(_ table: AMQPTable) {
    guard let once = AMQPWireFormat.encodeTable(table) else { return }  // checkRoundTrip reports it
    guard let decoded = AMQPWireFormat.decodeTable(once), let twice = AMQPWireFormat.encodeTable(decoded) else {
        fatalError("a table AMQPClient encoded does not decode and encode again")
    }
    guard once == twice else { fatalError("a table's bytes changed on a second pass through AMQPClient: \(once) became \(twice)") }
}

/// Properties encode again; without a header table, to the bytes they were decoded from (their
/// flags and fields in librabbitmq's canonical form: encoded, decoded, encoded again).
private func checkPropertyBytes(_ properties: AMQPProperties) {
    guard let encoded = AMQPWireFormat.encodeProperties(properties) else {
        fatalError("properties librabbitmq decoded do not encode again")
    }
    guard let again = AMQPWireFormat.decodeProperties(encoded) else { fatalError("properties AMQPClient encoded do not decode") }
    for field in AMQPProperties.ShortStringField.allCases where again.shortString(field) != properties.shortString(field) {
        fatalError("the \(field) property changed on its way through AMQPClient")
    }
    // A Date keeps seconds past 2^52 a rounding away (see `same`): those timestamps are left out.
    guard properties.headers == nil, (properties.timestamp?.timeIntervalSince1970 ?? 0) < 0x1p52 else { return }
    guard again == properties, AMQPWireFormat.encodeProperties(again) == encoded else {
        fatalError("properties changed on a second pass through AMQPClient")
    }
}

private func checkRoundTrip(_ table: AMQPTable) {
    guard let encoded = AMQPWireFormat.encodeTable(table) else {
        fatalError("a table librabbitmq decoded does not encode again")
    }
    guard let again = AMQPWireFormat.decodeTable(encoded) else {
        fatalError("a table AMQPClient encoded does not decode")
    }
    // Keys past a short string's 255 bytes (grown by U+FFFD) are cut when written; two keys may
    // then become one, and only decoding is checked.
    guard let expected = cutKeys(.table(table)) else { return }
    guard same(expected, .table(again)) else {
        fatalError("a table changed on its way through AMQPClient: \(table) became \(again)")
    }
}

/// Equality where NaN equals NaN (a float header is carried, not computed with) and a timestamp
/// is its whole seconds.
private func same(_ a: AMQPFieldValue, _ b: AMQPFieldValue) -> Bool {
    switch (a, b) {
    case (.float(let x), .float(let y)): return x == y || (x.isNaN && y.isNaN)
    case (.double(let x), .double(let y)): return x == y || (x.isNaN && y.isNaN)
    case (.timestamp(let x), .timestamp(let y)):
        // Whole seconds on the wire; a Date keeps them as a Double off by 2001, so beyond 2^53
        // the same seconds may come back a rounding away.
        let a = x.timeIntervalSince1970, b = y.timeIntervalSince1970
        return a == b || abs(a - b) <= max(1, abs(a) * 1e-12)
    case (.table(let x), .table(let y)):
        return x.count == y.count && x.allSatisfy { key, value in y[key].map { same(value, $0) } ?? false }
    case (.array(let x), .array(let y)):
        return x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
    default: return a == b
    }
}

/// The value as AMQPClient writes it: every table key cut to 255 bytes at a character boundary;
/// nil when two keys of one table become the same.
private func cutKeys(_ value: AMQPFieldValue) -> AMQPFieldValue? {
    switch value {
    case .table(let table):
        var out: AMQPTable = [:]
        for (key, element) in table {
            var end = key.utf8.endIndex
            if key.utf8.count > 255 {
                end = key.utf8.index(key.utf8.startIndex, offsetBy: 255)
                while end > key.utf8.startIndex && end.samePosition(in: key.unicodeScalars) == nil { key.utf8.formIndex(before: &end) }
            }
            let cut = String(key[..<end])
            guard out[cut] == nil, let element = cutKeys(element) else { return nil }
            out[cut] = element
        }
        return .table(out)
    case .array(let elements):
        var out: [AMQPFieldValue] = []
        for element in elements {
            guard let element = cutKeys(element) else { return nil }
            out.append(element)
        }
        return .array(out)
    default:
        return value
    }
}

/// Every table of the strict grammar (each value within its container's length, as RabbitMQ
/// parses it) that librabbitmq decodes, the byte walker walks. librabbitmq itself is laxer: a
/// value may run past its table's length into what follows (the fuzzer found one); RabbitMQ
/// refuses such a publish, and a copy of one would go out as librabbitmq re-encodes it.
private func checkWalkerAgrees(_ bytes: [UInt8]) {
    let length = bytes.prefix(4).reduce(0) { $0 << 8 | Int($1) }
    let table = Array(bytes.prefix(4 + length))
    guard isStrictTable(table[...]) else { return }
    guard HeaderTableBytes.removing(keys: [], from: table) == table else {
        fatalError("librabbitmq decoded a strict table the byte walker refuses: \(table)")
    }
}

/// A length-prefixed table or array whose every value lies within its own length, recursively
/// (at most `AMQPProperties.maximumHeaderDepth` levels, as kept tables are).
private func isStrictTable(_ bytes: ArraySlice<UInt8>, array: Bool = false, depth: Int = 1) -> Bool {
    guard depth <= AMQPProperties.maximumHeaderDepth, bytes.count >= 4 else { return false }
    let length = bytes.prefix(4).reduce(0) { $0 << 8 | Int($1) }
    guard bytes.count == 4 + length else { return false }
    var offset = bytes.startIndex + 4
    while offset < bytes.endIndex {
        if !array {
            offset += 1 + Int(bytes[offset])
            guard offset < bytes.endIndex else { return false }
        }
        let kind = bytes[offset]
        offset += 1
        let fixed: [UInt8: Int] = [0x74: 1, 0x62: 1, 0x42: 1, 0x73: 2, 0x75: 2, 0x49: 4, 0x69: 4, 0x66: 4, 0x44: 5, 0x6C: 8, 0x4C: 8, 0x64: 8, 0x54: 8, 0x56: 0]
        if let size = fixed[kind] {
            offset += size
        } else {
            guard offset + 4 <= bytes.endIndex else { return false }
            let size = 4 + bytes[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            guard offset + size <= bytes.endIndex else { return false }
            switch kind {
            case UInt8(ascii: "S"), UInt8(ascii: "x"): break
            case UInt8(ascii: "F"), UInt8(ascii: "A"):
                guard isStrictTable(bytes[offset..<offset + size], array: kind == UInt8(ascii: "A"), depth: depth + 1) else { return false }
            default: return false
            }
            offset += size
        }
        guard offset <= bytes.endIndex else { return false }
    }
    return true
}

/// A received table goes out as it came (librabbitmq writes a boolean's byte as 0 or 1, the
/// one change); a header written on a copy replaces every entry of its key, once, at the end,
/// and leaves the other entries' bytes as they were.
private func checkHeaderTableBytes(_ properties: AMQPProperties) {
    guard let received = properties.receivedHeaderTable, let view = properties.headers, isStrictTable(received[...]) else { return }
    guard let encoded = AMQPWireFormat.encodeProperties(properties),
        let range = encoded.withUnsafeBytes({ HeaderTableBytes.headerTable(inProperties: $0) })
    else { fatalError("properties with a kept header table do not encode, or lose the table") }
    let table = Array(encoded[range])
    guard table.count == received.count, zip(table, received).allSatisfy({ $0 == $1 || ($0 == 1 && $1 > 1) }) else {
        fatalError("a received header table changed on its way out: \(received) became \(table)")
    }
    // A key the encoder writes as it is (longer ones are cut to a short string).
    let key = view.keys.filter { $0.utf8.count <= 255 }.min() ?? "x-apns-reason"
    var copy = properties
    var headers = view
    headers[key] = .string("written")
    copy.setHeaders(headers, writing: [key])
    guard let written = AMQPWireFormat.encodeProperties(copy), let again = AMQPWireFormat.decodeProperties(written),
        let writtenTable = again.receivedHeaderTable
    else { fatalError("a copy with a header written does not encode and decode") }
    guard again.headers?[key] == .string("written"), again.headers?.count == headers.count else {
        fatalError("a written header did not replace its key: \(String(describing: again.headers))")
    }
    guard let others = HeaderTableBytes.removing(keys: [key], from: writtenTable),
        others == HeaderTableBytes.removing(keys: [key], from: table),
        writtenTable.count - others.count == 1 + key.utf8.count + 1 + 4 + "written".utf8.count
    else { fatalError("writing \(key) changed other entries' bytes, or carried it more than once") }
}
