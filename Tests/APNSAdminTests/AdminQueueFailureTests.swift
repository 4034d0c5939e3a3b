import AMQPClient
import APNSAdmin
import APNSConfig
import APNSOperations
import APNSTopologyNames
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import TestSupport

/// The queue routes on the real broker when it answers but the operation fails: no 503 ("broker
/// unavailable, try later"), which only a broker that cannot be reached is. Was: every failure
/// that was not a bad query answered 503.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"))
struct AdminQueueFailureTests {
    static let bearer: HTTPFields = [.authorization: "Bearer \(AdminHarness.token)"]

    /// A dead job of a bundle whose work queue does not exist: the broker returns the move, the
    /// answer is 409 naming it, and the job is back in its dead queue.
    @Test func aRequeueWithoutAWorkQueueIsAConflictAndKeepsTheJob() async throws {
        let orphan = uniqueName("com.example.orphan")
        let dead = TopologyNames.deadQueue(orphan)
        try await AdminHarness.with { harness in
            _ = try await harness.publisher.declareQueue(QueueDeclaration(name: dead, arguments: [:]))
            try await harness.publisher.publishAgainAfterNacks(AMQPOutboundMessage(
                exchange: "", routingKey: dead, body: Array(#"{"id":"orphan-1","payload":{}}"#.utf8), properties: .persistentJSON))
            try await harness.admin.makeApplication().test(.router) { client in
                let requeue = try await client.execute(uri: "/api/dead/requeue?bundle=\(orphan)", method: .post, headers: Self.bearer)
                #expect(requeue.status == .conflict)
                let error = try AdminRouteTests.json(requeue)["error"] as? String ?? ""
                #expect(error.contains("work queue does not exist") && error.contains(TopologyNames.workQueue(orphan)), "\(error)")
            }
            try await waitUntil("the job back in its dead queue", timeout: .seconds(60)) {
                try await harness.queues.readyCount(.dead, bundleID: orphan) == 1
            }
            _ = try? await harness.publisher.deleteQueue(dead)
        }
    }

    /// A dead queue another connection holds exclusively: the broker refuses to let the listing
    /// read it (405 RESOURCE_LOCKED), and the answer is 502 with the broker's reply.
    @Test func aQueueTheBrokerRefusesIsABadGatewayNamingTheRefusal() async throws {
        try await Self.withLockedDeadQueue { harness, locked in
            try await harness.admin.makeApplication().test(.router) { client in
                let listing = try await client.execute(uri: "/api/dead?bundle=\(locked)", method: .get, headers: Self.bearer)
                #expect(listing.status == .badGateway)
                let error = try AdminRouteTests.json(listing)["error"] as? String ?? ""
                #expect(error.hasPrefix("the broker refused") && error.contains("405"), "\(error)")
            }
        }
    }

    /// Runs `body` with a bundle whose dead queue another connection holds exclusively.
    static func withLockedDeadQueue(_ body: (AdminHarness, String) async throws -> Void) async throws {
        let locked = uniqueName("com.example.locked")
        try await AdminHarness.with { harness in
            let holder = try await AMQPConnection.connect(
                configuration: AMQPConfiguration(urlStrings: [try TestBroker.require().amqpURL], connectionName: "admin-test-holder"),
                logger: AdminHarness.logger)
            _ = try await holder.declareQueue(QueueDeclaration(name: TopologyNames.deadQueue(locked), arguments: [:], exclusive: true))
            do {
                try await body(harness, locked)
            } catch {
                await holder.close()
                throw error
            }
            await holder.close()
        }
    }

    /// The page's buttons for one job (requeue, purge) answer a failure as the API does. Were:
    /// the error thrown out of the route, a bare 500 that named nothing, for a broker down too.
    @Test func thePagesJobButtonsAnswerAFailureAsTheAPIDoes() async throws {
        try await Self.withLockedDeadQueue { harness, locked in
            let queues = QueueInspector(
                amqp: try AMQPConfiguration(urlStrings: [try TestBroker.require().amqpURL], connectionName: "admin-test-queues"),
                bundleIDs: [locked], retryDelays: [AdminHarness.retryDelay], logger: AdminHarness.logger, deliveryWait: .seconds(10),
                handBackWait: .seconds(30))
            let admin = try AdminService(
                settings: AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: AdminHarness.token),
                worker: harness.worker, queues: queues, prometheus: TestMetrics.prometheus, logger: AdminHarness.logger)
            try await admin.makeApplication().test(.router) { client in
                for action in ["requeue", "purge"] {
                    let answer = try await client.execute(uri: "/dead/some-job/\(action)", method: .post, headers: Self.bearer)
                    #expect(answer.status == .badGateway, "\(action)")
                    let error = try AdminRouteTests.json(answer)["error"] as? String ?? ""
                    #expect(error.hasPrefix("the broker refused") && error.contains("405"), "\(action): \(error)")
                }
            }
        }
    }
}
