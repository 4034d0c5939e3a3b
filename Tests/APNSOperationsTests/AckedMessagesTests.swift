// Recognising a job an operator's move or purge acked when a quorum queue hands it back anyway
// (its channel's close overtook the ack), without a broker.
import AMQPClient
import APNSTopologyNames
@testable import APNSOperations
import Testing

private func dead(_ id: String, failedAt: String = "2026-11-25T10:00:00Z", deliveryCount: Int64?, redelivered: Bool) -> AMQPDeliveredMessage {
    var properties = AMQPProperties.persistentJSON
    properties.messageID = id
    properties.headers = [JobHeaders.reason: .string("MalformedJob"), JobHeaders.failedAt: .string(failedAt)]
    if let deliveryCount { properties.headers?[JobHeaders.deliveryCount] = .int64(deliveryCount) }
    return AMQPDeliveredMessage(
        exchange: "", routingKey: "apns.b.dead", redelivered: redelivered, body: Array(#"{"id":"\#(id)"}"#.utf8), properties: properties)
}

@Suite struct AckedMessagesTests {
    @Test func anAckedMessageHandedBackIsRecognisedOnce() {
        var acked = AckedMessages()
        acked.acked(dead("a", deliveryCount: nil, redelivered: false), in: "q")
        #expect(acked.count == 1 && acked.queues == ["q"])
        // Handed back by the close: redelivered, its delivery count one higher.
        let back = dead("a", deliveryCount: 1, redelivered: true)
        let found = [
            acked.takeIfHandedBack(back, from: "other queue"),
            acked.takeIfHandedBack(back, from: "q"),
            // Taken once, it is no longer waited for.
            acked.takeIfHandedBack(back, from: "q"),
        ]
        #expect(found == [false, true, false])
        #expect(acked.isEmpty)
    }

    @Test func aFreshCopyOfTheSameJobIsNotTakenForIt() {
        var acked = AckedMessages()
        acked.acked(dead("a", deliveryCount: 2, redelivered: true), in: "q")
        let found = [
            // The worker dead-lettered the requeued job again: a new message, never delivered.
            acked.takeIfHandedBack(dead("a", deliveryCount: nil, redelivered: false), from: "q"),
            // The same after someone's listing: redelivered, but a later failure.
            acked.takeIfHandedBack(dead("a", failedAt: "2026-11-25T10:00:07Z", deliveryCount: 3, redelivered: true), from: "q"),
            // Not delivered more often than when it was acked: not the acked message come back.
            acked.takeIfHandedBack(dead("a", deliveryCount: 2, redelivered: true), from: "q"),
            acked.takeIfHandedBack(dead("a", deliveryCount: 3, redelivered: true), from: "q"),
        ]
        #expect(found == [false, false, false, true])
    }

    @Test func aClassicQueueWithoutDeliveryCountsNeverMatches() {
        // Classic queues write no x-delivery-count, and their acks are not overtaken.
        var acked = AckedMessages()
        acked.acked(dead("a", deliveryCount: nil, redelivered: true), in: "q")
        let found = acked.takeIfHandedBack(dead("a", deliveryCount: nil, redelivered: true), from: "q")
        #expect(!found)
    }

    @Test func copiesAckedTwiceComeBackTwice() {
        var acked = AckedMessages()
        acked.acked(dead("a", deliveryCount: 1, redelivered: true), in: "q")
        acked.acked(dead("a", deliveryCount: 4, redelivered: true), in: "q")
        acked.acked(dead("b", deliveryCount: 1, redelivered: true), in: "r")
        #expect(acked.count == 3 && acked.queues == ["q", "r"])
        let found = [
            acked.takeIfHandedBack(dead("a", deliveryCount: 1, redelivered: true), from: "q"),
            // Each copy back is matched to the acked one it most likely is.
            acked.takeIfHandedBack(dead("a", deliveryCount: 5, redelivered: true), from: "q"),
            acked.takeIfHandedBack(dead("a", deliveryCount: 2, redelivered: true), from: "q"),
            acked.takeIfHandedBack(dead("a", deliveryCount: 9, redelivered: true), from: "q"),
        ]
        #expect(found == [false, true, true, false])
        acked.forget("r")
        #expect(acked.isEmpty)
    }
}
