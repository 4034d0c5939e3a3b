// The facts a delivery event is written from (contract §8), pure: what a job carries in its
// `userInfo` reaches the event only in the shape docs/schemas/delivery-event.schema.json gives it.
import APNSModel
import APNSOutcome
import APNSWorker
import Foundation
import Testing

struct DeliveryEventFactsTests {
    static func job(groupJobId: String) throws -> Job {
        let body = #"{"token":"0123456789abcdef","payload":{"aps":{"alert":"Hi"}},"userInfo":{"groupJobId":"\#(groupJobId)"}}"#
        return try JobParser.parse(
            body: Array(body.utf8), bundleID: "com.example.app", messageID: nil, defaultEnvironment: .production, transport: .http2
        ).get()
    }

    /// A group job's fan-out writes a UUID; any publisher can write anything else there, which
    /// the event leaves out (the schema and the client take a canonical UUID only).
    @Test(arguments: [
        ("0b6c3a52-3c1e-5f4e-9b0d-2a7e8f1c4d21", "0b6c3a52-3c1e-5f4e-9b0d-2a7e8f1c4d21"),
        ("g-1", nil), ("", nil), ("0b6c3a52-3c1e-5f4e-9b0d-2a7e8f1c4d21 ", nil),
    ])
    func aGroupJobIdThatIsNotAUUIDIsLeftOut(written: String, inEvent: String?) throws {
        let facts = OutcomeRouter.answeredFacts(.binaryAccepted, outcome: .delivered, end: .delivered, job: try Self.job(groupJobId: written), attempts: 1)
        #expect(facts.groupJobID == inEvent)
    }
}
