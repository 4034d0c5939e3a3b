import AMQPClient
import APNSJSON
import APNSRegistryMessages
import APNSTopologyNames
import Foundation
import SeededRandom

/// Random, replayable mutations of valid messages, as a publisher with rights on the vhost could
/// send them (contract §4 "Hostile and damaged input"): field values of the wrong type, control
/// characters, numeric edges, over-long strings, missing fields, broken bytes, oversized bodies,
/// and hostile AMQP headers. Used by `HostilePublisherTests`.
struct HostileMutations {
    var rng: SeededGenerator

    init(seed: UInt64) { rng = SeededGenerator(seed: seed) }

    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }
    mutating func pick<T>(_ items: [T]) -> T { items[Int.random(in: 0..<items.count, using: &rng)] }

    /// Strings that must never reach a header, a path or PostgreSQL as they are.
    static let hostileStrings: [String] = [
        "", "a\u{0}b", "line\r\nx-injected: 1", "\n", "tab\there", "del\u{7F}", "c1\u{85}", "esc\u{1B}[2J",
        String(repeating: "x", count: 300), String(repeating: "é", count: 150), "🎉", "zz", "0x00", "../../etc",
        "com.example.app\u{0}", "-1", "9223372036854775808", "null",
    ]

    /// Values of every JSON type, with the numeric edges.
    mutating func hostileValue() -> JSONValue {
        switch Int.random(in: 0..<8, using: &rng) {
        case 0, 1: .string(pick(Self.hostileStrings))
        case 2: .integer(pick([Int64.max, Int64.min, -1, 0, 1 << 53 + 1, Int64(Int32.max) + 1, 20, 21]))
        case 3: .number(pick([1e308, -0.0, 0.5, -1e-300, 4.2e20]))
        case 4: .bool(chance(0.5))
        case 5: .null
        case 6: .array(chance(0.5) ? [] : [.string("a"), .integer(1), .null])
        default: .object(chance(0.5) ? [:] : ["aps": .object(["alert": .string(pick(Self.hostileStrings))])])
        }
    }

    /// One mutated body from a valid object: some fields replaced, removed or added, then
    /// sometimes broken at the byte level or made oversized.
    mutating func mutate(_ object: [String: JSONValue]) -> [UInt8] {
        var fields = object
        for _ in 0..<Int.random(in: 1...3, using: &rng) {
            let key = chance(0.85) && !fields.isEmpty ? pick(Array(fields.keys.sorted())) : pick(["unknown", "extra", "\u{0}", ""])
            if chance(0.15) { fields[key] = nil } else { fields[key] = hostileValue() }
        }
        var body: [UInt8] = []
        JSONValue.object(fields).append(to: &body)
        switch Int.random(in: 0..<10, using: &rng) {
        case 0 where !body.isEmpty:  // one byte changed
            body[Int.random(in: 0..<body.count, using: &rng)] = pick([0x00, 0x0A, 0x22, 0x5C, 0x7B, 0xC3, 0xFF, 0x80])
        case 1 where !body.isEmpty:  // cut short
            body = Array(body.prefix(Int.random(in: 0..<body.count, using: &rng)))
        case 2:  // over 64 KiB, now and then 1 MiB (never assembled: the broker dead-letters it)
            body += Array(repeating: UInt8(ascii: " "), count: chance(0.05) ? 1 << 20 : 64 * 1024)
        case 3:  // not JSON at all, or nothing
            body = pick([[], Array("not json".utf8), [0xFF, 0xFE, 0x00], Array(repeating: UInt8(ascii: "["), count: 5000)])
        default: break
        }
        return body
    }

    /// Headers whose worker-read values are NOT integers from 0 to 2^31−1, or of the wrong
    /// type: contract §4 says such values count as absent, so the job is handled as if they
    /// were not there. No NaN double: RabbitMQ 3.10 closes the *publisher's* connection on one
    /// (541 INTERNAL_ERROR, seen with seed 4242), so it never reaches a worker.
    /// `forgedDeath` adds a made-up `x-death` (not on messages the broker dead-letters itself).
    mutating func headersCountingAsAbsent(forgedDeath: Bool = true) -> AMQPTable {
        var table: AMQPTable = [:]
        for name in [JobHeaders.attempt, JobHeaders.deliveryCount] where chance(0.7) {
            table[name] = pick([
                .int64(Int64.max), .int64(Int64.min), .int64(-1), .int64(Int64(Int32.max) + 1), .int32(-5),
                .string("3"), .string("a\u{0}b"), .double(1e300), .float(-0.5), .bool(true), .void,
                .table(["x": .int8(1)]), .array([.int64(1)]), .bytes([0xFF]), .timestamp(Date(timeIntervalSince1970: 0)),
                .decimal(scale: 2, value: UInt32.max),
            ])
        }
        table[JobHeaders.reason] = pick([.string("MalformedJob"), .string("x\r\ny"), .int8(1), .void])
        if forgedDeath { table["x-death"] = pick([.void, .string("forged"), .array([.table(["count": .int64(Int64.max)])])]) }
        return table
    }

    /// AMQP properties a publisher may set freely (not `user-id` or `expiration`, which the
    /// broker itself checks and answers with a channel error).
    mutating func properties(headers: AMQPTable?) -> AMQPProperties {
        var properties = AMQPProperties.persistentJSON
        properties.headers = headers
        if chance(0.3) { properties.messageID = pick(["not-a-uuid", "", "6F9619FF-8B86-D011-B42D-00C04FC964FF", String(repeating: "m", count: 255)]) }
        if chance(0.2) { properties.contentType = pick(["text/plain", "", "application/octet-stream"]) }
        if chance(0.2) { properties.deliveryMode = 1 }
        if chance(0.2) { properties.type = pick(["job", "\u{0}"]) }
        return properties
    }

    /// Short-string values at their edges: empty, 255 bytes, not UTF-8 (U+FFFD would make them
    /// longer than a short string), CR/LF.
    static let hostileShortStrings: [AMQPShortString] = [
        "", AMQPShortString(String(repeating: "m", count: 255)), AMQPShortString(bytes: [UInt8](repeating: 0xFF, count: 255)),
        AMQPShortString(bytes: [0xC3]), AMQPShortString(bytes: [0xE2, 0x82]), "a\r\nx-injected: 1", "\u{0}",
    ]

    /// Every property a publisher may set, at its edges (contract §4 "The AMQP envelope is input
    /// too"): each short string from `hostileShortStrings`, `user_id` naming the publisher's own
    /// `user` (the broker refuses any other at the publisher's end) and `expiration`, both of
    /// which the worker's republished copies must drop; priority, delivery mode and timestamp.
    mutating func envelopeProperties(user: String) -> AMQPProperties {
        var properties = AMQPProperties.persistentJSON
        for field in AMQPProperties.ShortStringField.allCases where chance(0.4) {
            switch field {
            case .userID: properties.userID = user
            // Long enough never to expire before the worker takes it.
            case .expiration: properties.expiration = pick(["600000", "3600000"])
            default: properties.setShortString(field, pick(Self.hostileShortStrings))
            }
        }
        if chance(0.3) { properties.priority = pick([0, 9, 255]) }
        // Only 1 and 2: RabbitMQ closes the publisher's channel on any other (406 delivery_mode_unknown).
        if chance(0.3) { properties.deliveryMode = pick([1, 2]) }
        if chance(0.3) { properties.timestamp = pick([Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 0x1p40), Date()]) }
        if chance(0.3) { properties.headers = ["nested": .table(["a": .table(["b": .array([.bytes([0xFF]), .string("x")])])])] }
        return properties
    }

    /// Header tables over contract §4's 16 KiB bound (properties and headers together), up to
    /// what one frame of the broker's 128 KiB carries: the message is malformed whatever its body.
    mutating func oversizedHeaders() -> AMQPTable {
        switch Int.random(in: 0..<3, using: &rng) {
        case 0: ["filler": .string(String(repeating: "h", count: 17 * 1024))]
        case 1: ["a": .table(["b": .table(["c": .bytes([UInt8](repeating: 0xFE, count: 64 * 1024))])])]
        default: ["filler": .string(String(repeating: "g", count: 127 * 1024 - 600))]
        }
    }
}
