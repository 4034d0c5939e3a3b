@testable import AMQPClient
import Testing

@Suite struct RepeatedStringsTests {
    private func decode(_ text: String, _ field: RepeatedStrings.Field, channel: UInt16, with cache: inout RepeatedStrings) -> String {
        Array(text.utf8).withUnsafeBytes { cache.string($0, field, channel: channel) }
    }

    @Test func theSameBytesGiveTheKeptString() {
        var cache = RepeatedStrings()
        let first = decode("apns.com.example.long.bundle", .routingKey, channel: 3, with: &cache)
        let second = decode("apns.com.example.long.bundle", .routingKey, channel: 3, with: &cache)
        #expect(first == "apns.com.example.long.bundle")
        #expect(second == first)
        // The same storage: no second decoding (and so no second allocation).
        var a = first, b = second
        let same = a.withUTF8 { pa in b.withUTF8 { pb in pa.baseAddress == pb.baseAddress } }
        #expect(same)
    }

    @Test func changedBytesFieldsAndChannelsAreDecodedAfresh() {
        var cache = RepeatedStrings()
        #expect(decode("amq.ctag-one-consumer-tag", .consumerTag, channel: 1, with: &cache) == "amq.ctag-one-consumer-tag")
        #expect(decode("amq.ctag-two-consumer-tag", .consumerTag, channel: 1, with: &cache) == "amq.ctag-two-consumer-tag")
        #expect(decode("amq.ctag-two-consumer-tag-longer", .consumerTag, channel: 1, with: &cache) == "amq.ctag-two-consumer-tag-longer")
        #expect(decode("amq.ctag-two", .consumerTag, channel: 1, with: &cache) == "amq.ctag-two")
        #expect(decode("", .exchange, channel: 1, with: &cache) == "")
        #expect(decode("apns.retry", .exchange, channel: 1, with: &cache) == "apns.retry")
        #expect(decode("application/json", .contentType, channel: 2, with: &cache) == "application/json")
        #expect(decode("text/plain; charset=utf-8", .contentType, channel: 1, with: &cache) == "text/plain; charset=utf-8")
        #expect(decode("application/json", .contentType, channel: 2, with: &cache) == "application/json")
        // Bytes that are not UTF-8 decode as `String(decoding:)` repairs them, each time.
        let bad: [UInt8] = [0x61, 0xff, 0x62]
        let repaired = bad.withUnsafeBytes { cache.string($0, .routingKey, channel: 9) }
        #expect(repaired == "a\u{FFFD}b")
        #expect(bad.withUnsafeBytes { cache.string($0, .routingKey, channel: 9) } == repaired)
        cache.removeAll()
        #expect(decode("apns.retry", .exchange, channel: 1, with: &cache) == "apns.retry")
    }
}
