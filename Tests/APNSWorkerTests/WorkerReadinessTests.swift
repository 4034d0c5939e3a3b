import AMQPClient
import Testing

@testable import APNSWorker

/// `/ready`'s rule (`WorkerStatus.isReady`): every condition alone keeps an instance out of a
/// rollout, the topology's declaration at start-up included.
@Suite struct WorkerReadinessTests {
    private func status(declared: Bool = true, broker: AMQPConnectionState = .connected, registry: String? = nil) -> WorkerStatus {
        var status = WorkerStatus(broker: broker.rawValue, bundles: [])
        status.topologyDeclared = declared
        status.registry = registry
        return status
    }

    @Test func readyOnlyWhenDeclaredConnectedAndNothingHeld() {
        #expect(status().isReady)
        #expect(status(registry: "ok").isReady)
        // Connected, but the queues are not declared yet: a job published now could go unrouted.
        #expect(!status(declared: false).isReady)
        #expect(!status(broker: .connecting).isReady)
        #expect(!status(registry: "held").isReady)
    }
}
