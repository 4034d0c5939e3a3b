/// A job the bundle's token key cannot sign for (its environment override, or a push type's
/// topic a topic-specific key does not list) is not sent: it gets Apple's answer at once and the
/// bundle holds (contract §4: the configuration's fault, not the job's).
import AMQPClient
import APNSModel
import APNSOutcome
import APNSTopologyNames
import Foundation
import Logging
import ServiceLifecycleTestKit
import TestSupport
import Testing

@testable import APNSWorker

@Suite struct KeyScopeRoutingTests {
    func notification(environment: APNSEnvironment, topic: String = "com.example.app", pushType: PushType = .alert) -> PushNotification {
        PushNotification(
            id: UUID(), token: DeviceToken(hex: "aabbccdd")!, topic: topic, pushType: pushType, priority: 10,
            expiration: nil, collapseID: nil, payload: Array("{\"aps\":{}}".utf8), environment: environment)
    }

    func route(_ notification: PushNotification, scope: TokenKeyScope) async -> (TransportResult, sends: Int) {
        let production = ScriptedTransport(answer: ScriptedTransport.accepted)
        let sandbox = ScriptedTransport(answer: ScriptedTransport.accepted)
        let transport = PerEnvironmentTransport([.production: production, .sandbox: sandbox], keyScope: scope)
        let result = await transport.send(notification)
        return (result, production.sends + sandbox.sends)
    }

    @Test func aJobForTheOtherEnvironmentOfATeamScopedKeyIsHeldUnsent() async throws {
        let (result, sends) = await route(notification(environment: .sandbox), scope: TokenKeyScope(environment: .production))
        #expect(sends == 0)
        #expect(result == .http(HTTPAnswer(status: 403, reason: .badEnvironmentKeyInToken)))
        #expect(OutcomeClassifier.classify(result) == .held(reason: "BadEnvironmentKeyInToken", status: 403))
    }

    @Test func aPushTypeTopicATopicSpecificKeyDoesNotListIsHeldUnsent() async throws {
        let scope = TokenKeyScope(environment: .production, topics: ["com.example.app"])
        let voip = notification(environment: .production, topic: "com.example.app.voip", pushType: .voip)
        let (result, sends) = await route(voip, scope: scope)
        #expect(sends == 0)
        #expect(OutcomeClassifier.classify(result) == .held(reason: "TopicDisallowed", status: 400))
        // Both wrong: the environment is Apple's first answer (the token is checked before the topic).
        let (both, _) = await route(notification(environment: .sandbox, topic: "com.example.app.voip", pushType: .voip), scope: scope)
        #expect(both == .http(HTTPAnswer(status: 403, reason: .badEnvironmentKeyInToken)))
    }

    /// Through the pipeline (fake broker, no socket): a job for the key's environment is
    /// delivered; one whose `environment` asks for the other holds the bundle unsent, and waits in
    /// the queue.
    @Test func aPipelineHoldsOnAnOverrideItsKeyCannotServe() async throws {
        let bundle = "com.example.scoped"
        let broker = FakeBroker(workQueue: TopologyNames.workQueue(bundle))
        let production = ScriptedTransport(answer: ScriptedTransport.accepted)
        let sandbox = ScriptedTransport(answer: ScriptedTransport.accepted)
        let statistics = WorkerStatistics()
        var logger = Logger(label: "key-scope-test")
        logger.logLevel = .critical
        let pipeline = BundlePipeline(
            settings: BundlePipelineSettings(bundleID: bundle, prefetch: 1, retryPolicy: .standard, probeInterval: .seconds(5)),
            broker: broker,
            transport: PerEnvironmentTransport([.production: production, .sandbox: sandbox], keyScope: TokenKeyScope(environment: .production)),
            rollout: .open, statistics: statistics, logger: logger, clock: ManualClock())
        func enqueue(environment: String?) {
            let field = environment.map { #","environment":"\#($0)""# } ?? ""
            broker.enqueue(body: Array(#"{"token":"\#(String(repeating: "ab", count: 32))","payload":{"aps":{"alert":"hi"}}\#(field)}"#.utf8))
        }
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pipeline.run() }
                enqueue(environment: nil)
                try await waitUntil("the production job delivered") { broker.snapshot.acked.count == 1 }
                enqueue(environment: "sandbox")
                try await waitUntil("the hold") { pipeline.isHeld && broker.snapshot.acked.count == 2 }
                try await waitUntil("the job back in the queue") { broker.snapshot.ready.count == 1 }
                trigger.triggerGracefulShutdown()
                _ = try await group.next()
                group.cancelAll()
            }
        }
        #expect(production.sends == 1)
        #expect(sandbox.sends == 0)
        #expect(broker.snapshot.published.map(\.routingKey) == [TopologyNames.workQueue(bundle)])
        #expect(statistics.activity(bundle: bundle).jobs[JobEnd.held.label] == 1)
        #expect(statistics.activity(bundle: bundle).jobs[JobEnd.delivered.label] == 1)
    }

    @Test func whatTheKeyServesIsSent() async throws {
        let scope = TokenKeyScope(environment: .sandbox, topics: ["com.example.app", "COM.example.app.voip"])
        for job in [notification(environment: .sandbox), notification(environment: .sandbox, topic: "com.example.app.voip", pushType: .voip)] {
            let (result, sends) = await route(job, scope: scope)
            #expect(sends == 1)
            #expect(result == ScriptedTransport.accepted)
        }
        let (unrestricted, sends) = await route(notification(environment: .sandbox, topic: "com.example.app.complication"), scope: .unrestricted)
        #expect(sends == 1 && unrestricted == ScriptedTransport.accepted)
    }
}
