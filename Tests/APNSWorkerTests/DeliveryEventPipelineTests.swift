import AMQPClient
import APNSModel
import APNSTopologyNames
import Foundation
import Synchronization
import Testing
import TestSupport

@testable import APNSWorker

/// Delivery events in the pipeline's shell (contract §8), against the fake broker: the bundle's
/// level followed and changed while running, and a refused event published again rather than
/// the job handed back (which would send it to Apple again). The real broker's side:
/// `DeliveryEventsEndToEndTests`.
@Suite struct DeliveryEventPipelineTests {
    typealias Rig = BundlePipelineTests.Rig

    static func events(_ rig: Rig) -> [AMQPOutboundMessage] {
        rig.broker.snapshot.published.filter { $0.exchange == TopologyNames.eventsExchange }
    }

    @Test func theBundlesLevelIsFollowedAndAChangeAppliesToTheNextJobs() async throws {
        let rig = Rig(answer: ScriptedTransport.accepted)
        try await rig.running { _ in
            rig.enqueueJob()
            try await waitUntil("the first job acked") { rig.broker.snapshot.acked.count == 1 }
            #expect(rig.broker.snapshot.published.isEmpty, "none: nothing published")
            rig.pipeline.updateEvents(.ends)
            rig.enqueueJob()
            try await waitUntil("the second job acked") { rig.broker.snapshot.acked.count == 2 }
            let published = Self.events(rig)
            #expect(published.map(\.routingKey) == ["\(BundlePipelineTests.bundle).delivered"])
            #expect(published.first?.properties.messageID?.hasSuffix(".delivered.1") == true)
            rig.pipeline.updateEvents(.none)
            rig.enqueueJob()
            try await waitUntil("the third job acked") { rig.broker.snapshot.acked.count == 3 }
            #expect(Self.events(rig).count == 1)
        }
        #expect(rig.jobs(.delivered) == 3)
    }

    @Test func aRefusedEventIsPublishedAgainAndItsJobNeverHandedBack() async throws {
        let rig = Rig(answer: ScriptedTransport.accepted)
        rig.pipeline.updateEvents(.ends)
        rig.broker.state.withLock { $0.failPublishes = true }
        try await rig.running { _ in
            rig.enqueueJob()
            try await waitUntil("the job sent") { rig.transport.sends == 1 }
            // A job handed back to the broker would come again at once and be sent again.
            try await Task.sleep(for: .milliseconds(500))
            #expect(rig.broker.snapshot.nacked.isEmpty && rig.broker.snapshot.acked.isEmpty, "held while its event is refused")
            rig.broker.state.withLock { $0.failPublishes = false }
            try await waitUntil("the job acked once its event is taken") { rig.broker.snapshot.acked.count == 1 }
        }
        #expect(rig.transport.sends == 1, "sent to Apple once")
        #expect(rig.broker.snapshot.nacked.isEmpty)
        #expect(Self.events(rig).count == 1)
        #expect(rig.jobs(.delivered) == 1)
    }
}
