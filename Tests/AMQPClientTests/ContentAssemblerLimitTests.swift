import Testing

@testable import AMQPClient

/// The body limit of `ContentAssembler`: a body larger than the receiver's limit is
/// read and dropped frame by frame, never reserved or kept, whatever size its header claims.
@Suite struct ContentAssemblerLimitTests {
    static let limit = 64 * 1024
    static let frame = [UInt8](repeating: 0xAB, count: 131_072)

    static func deliver(_ assembler: inout ContentAssembler, tag: UInt64, limit: Int = limit, on channel: UInt16 = 3) {
        assembler.begin(.delivery(tag: tag, redelivered: false, consumerTag: "c"), exchange: "x", routingKey: "k", bodyLimit: limit, on: channel)
    }

    @Test func aBodyOverTheLimitKeepsNoByteAndIsDeliveredMarked() {
        var assembler = ContentAssembler()
        Self.deliver(&assembler, tag: 1)
        var properties = AMQPProperties()
        properties.messageID = "big"
        let size = 1 << 20
        #expect(assembler.header(on: 3, bodySize: UInt64(size)) { properties } == nil)
        var finished: ContentAssembler.Message?
        for index in 0..<(size / Self.frame.count) {
            finished = assembler.body(on: 3, Self.frame)
            #expect((finished == nil) == (index < size / Self.frame.count - 1), "frame \(index)")
        }
        let message = finished
        #expect(message?.oversized == true)
        #expect(message?.bodySize == UInt64(size))
        #expect(message?.body.isEmpty == true)
        #expect(message?.body.capacity == 0, "nothing reserved for an oversized body")
        #expect(message?.properties.messageID == "big", "the properties still arrive: the message must be settled")
        #expect(message?.kind == .delivery(tag: 1, redelivered: false, consumerTag: "c"))
        #expect(!assembler.isAssembling(on: 3))
    }

    @Test func aBodyOfExactlyTheLimitIsKeptAndOneByteMoreIsNot() {
        var assembler = ContentAssembler()
        Self.deliver(&assembler, tag: 1)
        _ = assembler.header(on: 3, bodySize: UInt64(Self.limit)) { nil }
        let whole = assembler.body(on: 3, [UInt8](repeating: 7, count: Self.limit))
        #expect(whole?.oversized == false)
        #expect(whole?.body.count == Self.limit)

        Self.deliver(&assembler, tag: 2)
        _ = assembler.header(on: 3, bodySize: UInt64(Self.limit + 1)) { nil }
        #expect(assembler.body(on: 3, [UInt8](repeating: 7, count: Self.limit)) == nil)
        let over = assembler.body(on: 3, [7])
        #expect(over?.oversized == true)
        #expect(over?.body.isEmpty == true)
    }

    /// A body size from the wire beyond Int (or just huge) neither traps nor reserves memory:
    /// the old code converted it with `Int(_:)` and reserved that much capacity.
    @Test(arguments: [UInt64.max, UInt64(Int.max) + 1, UInt64(Int.max), 1 << 40])
    func aHostileBodySizeIsNeverTrusted(size: UInt64) {
        for limit in [Self.limit, Int.max] {
            var assembler = ContentAssembler()
            Self.deliver(&assembler, tag: 1, limit: limit)
            #expect(assembler.header(on: 3, bodySize: size) { nil } == nil)
            #expect(assembler.body(on: 3, Self.frame) == nil, "not complete: the broker would have to send the rest")
            #expect(assembler.isAssembling(on: 3))
            assembler.discard(channel: 3)
            // The channel is usable for the next message.
            Self.deliver(&assembler, tag: 2, limit: limit)
            _ = assembler.header(on: 3, bodySize: 2) { nil }
            #expect(assembler.body(on: 3, [1, 2])?.body == [1, 2])
        }
    }

    /// An unlimited receiver (an operator's listing) reserves at most a bounded amount up front
    /// and grows with the bytes that actually arrive.
    @Test func anUnlimitedReceiverReservesBoundedCapacity() {
        var assembler = ContentAssembler()
        Self.deliver(&assembler, tag: 1, limit: .max)
        let size = 3 * ContentAssembler.maximumReservation
        _ = assembler.header(on: 3, bodySize: UInt64(size)) { nil }
        var message: ContentAssembler.Message?
        for _ in 0..<(size / Self.frame.count) { message = assembler.body(on: 3, Self.frame) }
        #expect(message?.body.count == size)
        #expect(message?.oversized == false)
    }

    @Test func bytesBeyondTheAnnouncedSizeAreNotKept() {
        var assembler = ContentAssembler()
        Self.deliver(&assembler, tag: 1)
        _ = assembler.header(on: 3, bodySize: 3) { nil }
        #expect(assembler.body(on: 3, [1, 2, 3, 4, 5, 6])?.body == [1, 2, 3])
    }

    /// After an oversized message the next one on the same channel is whole, and one on another
    /// channel interleaved with it is untouched; body frames after a message ended belong to
    /// nothing and are ignored.
    @Test func theNextDeliveryAfterAnOversizedOneIsWhole() {
        var assembler = ContentAssembler()
        Self.deliver(&assembler, tag: 1, on: 3)
        Self.deliver(&assembler, tag: 9, on: 4)
        _ = assembler.header(on: 3, bodySize: UInt64(2 * Self.frame.count)) { nil }
        _ = assembler.header(on: 4, bodySize: 4) { nil }
        #expect(assembler.body(on: 3, Self.frame) == nil)
        #expect(assembler.body(on: 4, [1, 2]) == nil)
        #expect(assembler.body(on: 3, Self.frame)?.oversized == true)
        #expect(assembler.body(on: 3, Self.frame) == nil, "a frame after the end belongs to nothing")
        #expect(!assembler.isAssembling(on: 3))
        #expect(assembler.body(on: 4, [3, 4])?.body == [1, 2, 3, 4])

        Self.deliver(&assembler, tag: 2, on: 3)
        _ = assembler.header(on: 3, bodySize: 5) { nil }
        let next = assembler.body(on: 3, [5, 6, 7, 8, 9])
        #expect(next?.body == [5, 6, 7, 8, 9])
        #expect(next?.oversized == false)
        #expect(next?.kind == .delivery(tag: 2, redelivered: false, consumerTag: "c"))
    }

    /// A delivery no consumer takes (limit 0) keeps no body either.
    @Test func aDeliveryForNobodyKeepsNoBody() {
        var assembler = ContentAssembler()
        Self.deliver(&assembler, tag: 1, limit: 0)
        _ = assembler.header(on: 3, bodySize: 3) { nil }
        let message = assembler.body(on: 3, [1, 2, 3])
        #expect(message?.oversized == true)
        #expect(message?.body.isEmpty == true)
    }
}

extension ContentAssemblerLimitTests {
    /// Found by FuzzContentAssembler: a second header announcing less than was already kept
    /// trapped on a negative `prefix` (the owner thread, so the connection). It now keeps no more
    /// than the latest size, and nothing once that size is over the limit.
    @Test func aSecondHeaderNeverLeavesMoreKeptThanItAnnounces() {
        var assembler = ContentAssembler()
        Self.deliver(&assembler, tag: 1)
        _ = assembler.header(on: 3, bodySize: 6) { nil }
        #expect(assembler.body(on: 3, [1, 2, 3, 4]) == nil)
        _ = assembler.header(on: 3, bodySize: 2) { nil }
        #expect(assembler.body(on: 3, [5])?.body == [1, 2])

        Self.deliver(&assembler, tag: 2)
        _ = assembler.header(on: 3, bodySize: 6) { nil }
        #expect(assembler.body(on: 3, [1, 2, 3]) == nil)
        _ = assembler.header(on: 3, bodySize: UInt64(Self.limit + 1)) { nil }
        let oversized = assembler.body(on: 3, Self.frame)
        #expect(oversized?.body.isEmpty == true)
        // Found by FuzzContentAssembler too: nor does it keep what the first header reserved.
        #expect(oversized?.body.capacity == 0)
    }
}
