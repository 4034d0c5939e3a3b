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

    /// Jobs whose settles publish go to the broker in batches, a job's route message (here its
    /// invalid token's feedback) and its event always in the same one, in that order; every job
    /// acked once, after its batch.
    @Test func aRoutesMessageAndItsEventShareOneBatch() async throws {
        let rig = Rig(answer: ScriptedTransport.unregistered)
        rig.pipeline.updateEvents(.ends)
        let jobs = 30
        try await rig.running { _ in
            for _ in 0..<jobs { rig.enqueueJob() }
            try await waitUntil("every job acked") { rig.broker.snapshot.acked.count == jobs }
        }
        let batches = rig.broker.snapshot.batches
        #expect(batches.map(\.count).reduce(0, +) == 2 * jobs, "one feedback message and one event a job, all in batches")
        for batch in batches {
            let exchanges = batch.map(\.exchange)
            let pairs = stride(from: 0, to: exchanges.count, by: 2).map { Array(exchanges[$0..<min($0 + 2, exchanges.count)]) }
            #expect(pairs.allSatisfy { $0 == [TopologyNames.feedbackExchange, TopologyNames.eventsExchange] }, "\(exchanges)")
        }
        #expect(Set(rig.broker.snapshot.acked).count == jobs)
        #expect(rig.broker.snapshot.nacked.isEmpty)
        #expect(rig.jobs(.invalidToken) == jobs)
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
