import AMQPClient
import APNSModel
import APNSTopology
import Foundation
import Testing

/// The one check of what a message arrived without and its dead letter, shared by the bundle
/// pipelines and the registry's consumers (contract §4).
@Suite struct DeadOnArrivalTests {
    static func message(_ change: (inout AMQPDeliveredMessage) -> Void = { _ in }) -> AMQPDeliveredMessage {
        var message = AMQPDeliveredMessage(
            exchange: "", routingKey: "jobs", redelivered: false, body: Array("{}".utf8), properties: .persistentJSON)
        change(&message)
        return message
    }

    @Test func aMessageKeptWholeIsNotDeadOnArrival() {
        #expect(DeadOnArrival(Self.message()) == nil)
    }

    @Test func aBodyOverTheLimitSaysWhetherItsCopyWasMade() {
        #expect(DeadOnArrival(Self.message { $0.oversizedBodySize = 9_000 }) == .bodyTooLarge(size: 9_000, copied: false))
        let copied = Self.message {
            $0.oversizedBodySize = 9_000
            $0.oversizedBodyDeadLettered = true
        }
        #expect(DeadOnArrival(copied) == .bodyTooLarge(size: 9_000, copied: true))
    }

    @Test func aHeaderTableNotKeptSaysWhy() {
        #expect(
            DeadOnArrival(Self.message { $0.oversizedPropertiesSize = 70_000 })
                == .headerTableDropped(JobError.oversizedProperties(70_000, limit: AMQPProperties.maximumEncodedSize)))
        #expect(
            DeadOnArrival(Self.message { $0.headersNestedTooDeep = true })
                == .headerTableDropped(JobError.nestedHeaders(limit: AMQPProperties.maximumHeaderDepth)))
    }

    @Test func theOversizedDeadLetterIsAMalformedJobNeverTried() {
        let failedAt = Date(timeIntervalSince1970: 1_700_000_000)
        var properties = AMQPProperties.persistentJSON
        properties.messageID = "job-1"
        properties.userID = "guest"
        let letter = DeadOnArrival.oversizedDeadLetter(queue: "apns.dead.x", maxBodyBytes: 4096) { failedAt }(properties, 9_000)
        #expect(letter.routingKey == "apns.dead.x")
        #expect(letter.exchange == "")
        #expect(letter.body.isEmpty, "the connection publishes the body as it arrives")
        #expect(letter.properties.messageID == "job-1")
        #expect(letter.properties.userID == nil, "republished: the broker would refuse another user's id")
        let envelope = JobEnvelope(letter.properties.headers)
        #expect(envelope.reason == JobError.Kind.malformedJob.rawValue)
        #expect(envelope.status == 0)
        #expect(envelope.attempts == 0)
        #expect(envelope.failedAt == failedAt)
        #expect(envelope.error == "body: 9000 bytes, over the 4096 allowed")
    }
}
