import AMQPClient
import APNSTopologyNames
import Testing

@testable import APNSWorker

@Suite struct DeliveryLimitTests {
    func message(redelivered: Bool, count: AMQPFieldValue? = nil, id: String? = "job-1", body: String = "{}") -> AMQPDeliveredMessage {
        var properties = AMQPProperties(contentType: "application/json", deliveryMode: 2, messageID: id)
        if let count { properties.headers = [JobHeaders.deliveryCount: count] }
        return AMQPDeliveredMessage(
            exchange: "apns.jobs", routingKey: "com.example.app", redelivered: redelivered, body: Array(body.utf8),
            properties: properties)
    }

    func counted(_ limit: inout DeliveryLimit, _ message: AMQPDeliveredMessage) -> Int {
        limit.deliveries(of: message)
    }

    func exceeded(_ limit: inout DeliveryLimit, _ message: AMQPDeliveredMessage) -> Bool {
        limit.isExceeded(by: message)
    }

    @Test func aFirstDeliveryIsOne() {
        var limit = DeliveryLimit(maxDeliveries: 20)
        #expect(counted(&limit, message(redelivered: false)) == 1)
        #expect(counted(&limit, message(redelivered: false)) == 1)
    }

    /// Quorum queues: x-delivery-count is the number of earlier deliveries, whatever its width.
    @Test(arguments: [AMQPFieldValue.int64(20), .int32(20), .int16(20), .string("20")])
    func quorumCountDecides(count: AMQPFieldValue) {
        var limit = DeliveryLimit(maxDeliveries: 20)
        #expect(counted(&limit, message(redelivered: true, count: count)) == 21)
        #expect(exceeded(&limit, message(redelivered: true, count: count)))
        #expect(!exceeded(&limit, message(redelivered: true, count: .int64(19))))
    }

    /// A count that is no integer in 0...2^31−1 counts as absent (contract §4): 2^63−1 once
    /// trapped on `+ 1`. Absent, the redelivered flag counts: at least the second.
    @Test(arguments: [AMQPFieldValue.int64(Int64.max), .int64(Int64.min), .int64(1 << 31), .string("9223372036854775807")])
    func anOutOfRangeCountIsAbsent(count: AMQPFieldValue) {
        var limit = DeliveryLimit(maxDeliveries: 20)
        #expect(counted(&limit, message(redelivered: true, count: count)) == 2)
        #expect(!exceeded(&limit, message(redelivered: false, count: count)))
    }

    /// Classic queues: this worker counts the redeliveries it sees of one job.
    @Test func classicRedeliveriesAreCountedPerJob() {
        var limit = DeliveryLimit(maxDeliveries: 3)
        #expect(counted(&limit, message(redelivered: true)) == 2)
        #expect(counted(&limit, message(redelivered: true, id: "job-2")) == 2)
        #expect(!exceeded(&limit, message(redelivered: true)))  // 3
        #expect(exceeded(&limit, message(redelivered: true)))  // 4
        #expect(counted(&limit, message(redelivered: true, id: "job-2")) == 3)
        // Without a message id, the body tells jobs apart.
        #expect(counted(&limit, message(redelivered: true, id: nil, body: "a")) == 2)
        #expect(counted(&limit, message(redelivered: true, id: nil, body: "b")) == 2)
        #expect(counted(&limit, message(redelivered: true, id: nil, body: "a")) == 3)
    }

    /// The memory of redelivered jobs is bounded: the oldest are forgotten first.
    @Test func rememberedJobsAreBounded() {
        var limit = DeliveryLimit(maxDeliveries: 5)
        let total = DeliveryLimit.rememberedJobs * 2 + 17
        for i in 0..<total { _ = limit.deliveries(of: message(redelivered: true, id: "job-\(i)")) }
        #expect(counted(&limit, message(redelivered: true, id: "job-\(total - 1)")) == 3)
        #expect(counted(&limit, message(redelivered: true, id: "job-0")) == 2)
    }
}

extension DeliveryLimit {
    /// Whether this delivery is one too many.
    mutating func isExceeded(by message: AMQPDeliveredMessage) -> Bool {
        deliveries(of: message) > maxDeliveries
    }
}
