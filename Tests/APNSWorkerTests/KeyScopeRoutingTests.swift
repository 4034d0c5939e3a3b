/// A job the bundle's token key cannot sign for (its environment override, or a push type's
/// topic a topic-specific key does not list) is not sent: it gets Apple's answer at once and the
/// bundle holds (contract §4: the configuration's fault, not the job's).
import APNSModel
import APNSOutcome
import Foundation
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
        let router = EnvironmentRouter([.production: production, .sandbox: sandbox], keyScope: scope)
        let result = await router.send(notification)
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
