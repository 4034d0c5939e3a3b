import AMQPClient
import APNSConfig
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

@testable import APNSRegistry

/// PostgreSQL stopped and started under a running worker (contract §6: the registry down is a
/// held fault): token jobs go on, group jobs wait in the broker and are done when it returns,
/// nothing is dead-lettered, `/ready` names the registry meanwhile, and the counts are complete.
extension RegistryBrokerSuites {
@Suite(.serialized, .enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct RegistryOutageTests {
    func ready(_ port: Int) async throws -> (status: Int, body: String) {
        let result = try await runProcess("/usr/bin/curl", ["-s", "-w", "\n%{http_code}", "http://127.0.0.1:\(port)/ready"])
        let lines = result.stdout.split(separator: "\n")
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    @Test func postgresStoppedAndStartedMidStream() async throws {
        let postgres = try PrivatePostgres()
        try await postgres.start()
        do {
            try await run(postgres)
        } catch {
            await postgres.stop()
            postgres.remove()
            throw error
        }
        await postgres.stop()
        postgres.remove()
    }

    func run(_ postgres: PrivatePostgres) async throws {
        let settings = try await TestPostgres.freshDatabase(port: postgres.port)
        let harness = try await RegistryHarness.start(registry: settings)
        try await harness.withWorkers { workers in try await outage(postgres, harness, settings, workers[0]) }
    }

    func outage(_ postgres: PrivatePostgres, _ harness: RegistryHarness, _ settings: RegistrySettings, _ worker: ChildProcess) async throws {
        let bundle = harness.bundles[0]
        let groupTokens = (0..<3).map(RegistryHarness.token)
        for token in groupTokens { try await harness.register(bundle, token, group: "acct", at: 10) }
        try await TestPostgres.withStore(settings) { store in
            try await waitUntil("registrations applied", timeout: .seconds(120)) {
                try await store.activeDevices(group: "acct", after: nil, limit: 10).count == 3
            }
        }
        try await waitUntil("the admin server listening", timeout: .seconds(60)) { RegistryHarness.adminPort(worker) != nil }
        let port = try #require(RegistryHarness.adminPort(worker))
        #expect(try await ready(port).status == 200)

        await postgres.stop()
        try await harness.publish(TopologyNames.groups, #"{"group":"acct","payload":{"aps":{"content-available":1}}}"#)
        let tokenJobs = (100..<120).map(RegistryHarness.token)
        for token in tokenJobs {
            var properties = AMQPProperties.persistentJSON
            properties.messageID = UUID().uuidString
            try await harness.connection.publishAgainAfterNacks(
                AMQPOutboundMessage(
                    exchange: TopologyNames.jobsExchange, routingKey: bundle,
                    body: Array(#"{"token":"\#(token)","payload":{"aps":{"alert":"hi"}}}"#.utf8), properties: properties))
        }
        try await waitUntil("token jobs delivered while the registry is down", timeout: .seconds(120)) {
            Set(harness.accepted(bundle).keys).isSuperset(of: tokenJobs)
        }
        try await waitUntil("/ready 503 naming the registry", timeout: .seconds(120)) {
            let answer = try await ready(port)
            let body = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any]
            return answer.status == 503 && body?["registry"] as? String == "held"
        }
        #expect(Set(harness.accepted(bundle).keys).isDisjoint(with: groupTokens), "a group job went out without the registry")
        #expect(try await harness.messageCount(TopologyNames.groupsDead) == 0)

        try await postgres.start()
        try await waitUntil("the held group job done once the registry is back", timeout: .seconds(180)) {
            Set(harness.accepted(bundle).keys).isSuperset(of: groupTokens)
        }
        try await waitUntil("/ready 200 again", timeout: .seconds(60)) { try await ready(port).status == 200 }
        #expect(try await harness.messageCount(TopologyNames.groupsDead) == 0)
        #expect(try await harness.messageCount(TopologyNames.registryDead) == 0)
        try await TestPostgres.withStore(settings) { store in
            try await waitUntil("counts complete after the outage", timeout: .seconds(60)) {
                let rows = try await store.counts(sinceEpochSeconds: 0).filter { $0.bundleId == bundle }
                let delivered = rows.filter { $0.end == "delivered" }.reduce(0) { $0 + $1.count }
                let fanned = rows.filter { $0.end == "fannedOut" }.reduce(0) { $0 + $1.count }
                return delivered == 23 && fanned == 3
            }
        }
        let alerts = worker.log.components(separatedBy: "device registry (PostgreSQL) unavailable").count - 1
        #expect(alerts == 1, "one loud error per outage, got \(alerts)")
    }
}
}
