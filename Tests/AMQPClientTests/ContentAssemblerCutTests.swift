import Testing

@testable import AMQPClient

/// Bodies cut as they are read (contract §5): a consumer that cuts bodies (the
/// operator listings) gets the first `limit` bytes of a larger body and its size, and never
/// holds more than the limit of it, whatever the header claims.
@Suite struct ContentAssemblerCutTests {
    static let limit = 64 * 1024
    /// Frames of 128 KiB, each byte telling its offset apart (so a wrong prefix shows).
    static func frame(_ index: Int) -> [UInt8] { (0..<131_072).map { UInt8(truncatingIfNeeded: index * 131_072 + $0 / 7) } }

    static func begin(_ assembler: inout ContentAssembler, tag: UInt64, limit: Int = limit) {
        assembler.begin(
            .delivery(tag: tag, redelivered: false, consumerTag: "c"), exchange: "x", routingKey: "k", bodyLimit: limit, keepsPrefix: true,
            on: 3)
    }

    @Test func aBodyOverTheLimitKeepsItsFirstBytesAndItsSize() {
        var assembler = ContentAssembler()
        Self.begin(&assembler, tag: 1)
        let frames = 16
        #expect(assembler.header(on: 3, bodySize: UInt64(frames * 131_072)) { nil } == nil)
        var sent: [UInt8] = []
        var finished: ContentAssembler.Message?
        for index in 0..<frames {
            let frame = Self.frame(index)
            if sent.count < Self.limit { sent += frame }
            finished = assembler.body(on: 3, frame)
        }
        let message = finished
        #expect(message?.oversized == true)
        #expect(message?.bodySize == UInt64(frames * 131_072))
        #expect(message?.body == Array(sent.prefix(Self.limit)))
        #expect((message?.body.capacity ?? .max) < 2 * Self.limit, "the cut body never grew past its limit")
        #expect(!assembler.isAssembling(on: 3))
    }

    @Test func aBodyWithinTheLimitIsWholeAndOneByteMoreIsCut() {
        var assembler = ContentAssembler()
        Self.begin(&assembler, tag: 1)
        _ = assembler.header(on: 3, bodySize: UInt64(Self.limit)) { nil }
        let whole = assembler.body(on: 3, [UInt8](repeating: 7, count: Self.limit))
        #expect(whole?.oversized == false && whole?.body.count == Self.limit)

        Self.begin(&assembler, tag: 2)
        _ = assembler.header(on: 3, bodySize: UInt64(Self.limit + 1)) { nil }
        #expect(assembler.body(on: 3, [UInt8](repeating: 7, count: Self.limit)) == nil)
        let over = assembler.body(on: 3, [8])
        #expect(over?.oversized == true && over?.body == [UInt8](repeating: 7, count: Self.limit))
    }

    /// A header claiming any size reserves at most the limit; a second header (a broker's bug)
    /// keeps no more than either allows.
    @Test(arguments: [UInt64.max, UInt64(Int.max), 1 << 40])
    func aHostileBodySizeReservesNoMoreThanTheLimit(size: UInt64) {
        var assembler = ContentAssembler()
        Self.begin(&assembler, tag: 1)
        #expect(assembler.header(on: 3, bodySize: size) { nil } == nil)
        #expect(assembler.body(on: 3, [UInt8](repeating: 1, count: 2 * Self.limit)) == nil)
        #expect(assembler.header(on: 3, bodySize: 10) { nil } == nil)
        let message = assembler.body(on: 3, [2])
        #expect(message?.body.count == 10 && message?.oversized == false)
    }
}
