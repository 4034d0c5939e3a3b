/// Which event loop each of a pool's connection slots connects on: the group's loops in turn by
/// slot, whatever else has drawn loops from the group (`HTTP2Transport.eventLoop(forSlot:)`).
@testable import APNSTransport
import NIOCore
import NIOPosix
import Testing

@Suite("HTTP2Transport's slots and event loops")
struct HTTP2SlotLoopTests {
    @Test func aPoolsSlotsSpreadOverTheLoopsEvenWhenOthersDrewFromTheGroupBetween() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let transport = try HTTP2Transport(
            configuration: HTTP2Integration.configuration(port: 1), logger: HTTP2Integration.logger, eventLoopGroup: group)
        let loops = Array(group.makeIterator())
        // Another user of the group (a timer, another pool) takes the next loop between two
        // connects: with the group's `next()`, both slots drew the same loop.
        let first = transport.eventLoop(forSlot: 0)
        _ = group.next()
        let second = transport.eventLoop(forSlot: 1)
        #expect(first === loops[0])
        #expect(second === loops[1])
        #expect(transport.eventLoop(forSlot: 2) === loops[0], "slots past the loops' count wrap around")
        #expect(transport.eventLoop(forSlot: 0) === first, "a slot connects again on its own loop")
        try await group.shutdownGracefully()
    }
}
