/// The connection's receive window: Apple's error answers carry bodies, and HTTP/2 lets a server
/// send only as many body bytes on a connection as the client has granted (65,535 to start,
/// RFC 9113 §6.9.2). `NIOHTTP2Handler` without its stream multiplexer grants no more by itself.
import APNSModel
import APNSSimulator
@testable import APNSTransport
import Testing
import TestSupport

private typealias Env = HTTP2Integration

@Suite("HTTP2Transport's connection receive window", .serialized)
struct HTTP2ConnectionWindowTests {
    @Test func theWindowIsRaisedBackToWholeOnceHalfIsSpent() {
        let whole = HTTP2ConnectionHandler.connectionWindowTarget
        #expect(HTTP2ConnectionHandler.connectionWindowIncrement(inboundWindow: whole) == nil)
        #expect(HTTP2ConnectionHandler.connectionWindowIncrement(inboundWindow: whole / 2 + 1) == nil)
        #expect(HTTP2ConnectionHandler.connectionWindowIncrement(inboundWindow: whole / 2) == whole - whole / 2)
        #expect(HTTP2ConnectionHandler.connectionWindowIncrement(inboundWindow: 0) == whole)
    }

    @Test func moreErrorBodiesThanTheFirstWindowHoldsAreAllAnswered() async throws {
        try await Env.withTransport(transport: { $0.connections = 1; $0.maxConnections = 1 }) { simulator, transport in
            let device = SimulatorTestEnvironment.deviceToken()
            simulator.script(token: device, .badDeviceToken)
            // {"reason":"BadDeviceToken"} is 27 bytes: 2,600 answers are 70,200 bytes of bodies on
            // the one connection, past the 65,535 the connection starts with (2,427 answers).
            // In rounds of 200, each sent once the last is answered: 3,000 sent at once took
            // over 120 s while every suite of a full run started, and the last ones timed out.
            // Without a grant, the round that crosses the window waits out its deadline.
            var answered = 0
            var otherwise: Set<String> = []
            for _ in 0..<13 {
                let results = await Env.sendAll((0..<200).map { _ in Env.notification(token: device) }, through: transport)
                answered += results.filter { $0.answer?.reason == .badDeviceToken }.count
                otherwise.formUnion(results.filter { $0.answer?.reason != .badDeviceToken }.map { "\($0)" })
            }
            #expect(answered == 2600, "answered 400 BadDeviceToken: \(answered) of 2,600; the others: \(otherwise.sorted())")
            #expect(simulator.counters().connections == 1)
        }
    }
}
