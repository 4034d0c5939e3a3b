import AMQPClient
import APNSConfig
import APNSModel
import APNSRegistryMessages
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

@testable import APNSRegistry

/// Contract §4: a database error the message itself causes (SQLSTATE class 22, 23 or 54) makes the
/// message malformed; only a lost or refused connection is the registry being unavailable.
@Suite struct DatabaseFaultClassificationTests {
    @Test(arguments: ["22021", "22001", "22P02", "23505", "23514", "23502", "54000"])
    func dataAndConstraintErrorsAreTheMessagesFault(sqlState: String) {
        guard case .message(let error) = DatabaseFault.classify(sqlState: sqlState, serverMessage: "refused\nsecond line", column: nil) else {
            Issue.record("\(sqlState) classified as unavailable")
            return
        }
        #expect(error.reason == "MalformedJob")
        #expect(error.field == "body")
        #expect(error.message.contains("SQLSTATE \(sqlState)"))
        #expect(!error.message.contains("\n"))
    }

    @Test(arguments: ["08006", "08001", "57P01", "53300", "40001", "XX000", "2", "", "230"])
    func everythingElseIsTheRegistryUnavailable(sqlState: String) {
        #expect(DatabaseFault.classify(sqlState: sqlState, serverMessage: "x", column: "c") == .unavailable)
    }

    @Test func anErrorThatIsNotPostgresIsUnavailable() {
        #expect(DatabaseFault.classify(RegistryUnavailable(detail: "no answer")) == .unavailable)
    }
}

/// The same decision on errors the real PostgreSQL of `scripts/test` raises.
@Suite(.enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct DatabaseFaultStoreTests {
    /// Applies `group` in a fresh database (after `prepare`) and expects PostgreSQL's refusal,
    /// classified as the message's fault with `sqlState`.
    func expectRefusal(group: String, sqlState: String, prepare: @escaping @Sendable (RegistrySettings) async throws -> Void = { _ in }) async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            try await prepare(settings)
            do {
                try await store.apply(RegistrationMessage(op: .register, bundleID: "com.example.app", token: "abcd", group: group, at: 1))
                Issue.record("PostgreSQL took group \(group.debugDescription)")
            } catch {
                guard case .message(let malformed) = DatabaseFault.classify(error) else {
                    Issue.record("classified as unavailable: \(String(reflecting: error))")
                    return
                }
                #expect(malformed.message.contains("SQLSTATE \(sqlState)"))
            }
        }
    }

    /// A value this version's validation refuses first, sent to PostgreSQL directly: NUL in text.
    @Test func nulInAGroupIsRefusedByPostgresAsTheMessagesFault() async throws {
        try await expectRefusal(group: "a\u{0}b", sqlState: "22021")
    }

    @Test func aConstraintViolationIsTheMessagesFault() async throws {
        try await expectRefusal(group: RegistryRefusingDatabase.refusedGroup, sqlState: "23514", prepare: RegistryRefusingDatabase.addRefusal)
    }
}

/// A CHECK constraint added to a test database: a value that passes the worker's validation and
/// PostgreSQL refuses (SQLSTATE 23514), to drive the classification with a real server.
enum RegistryRefusingDatabase {
    static let refusedGroup = "refused-by-postgres"

    static func addRefusal(_ settings: RegistrySettings) async throws {
        let url = settings.url
        let sql = "ALTER TABLE apns_devices ADD CONSTRAINT test_refused_group CHECK (group_name IS DISTINCT FROM '\(refusedGroup)')"
        let result = try await runProcess(
            TestPostgres.bin + "/psql",
            ["-h", url.host, "-p", "\(url.port)", "-U", "postgres", "-d", url.database, "-v", "ON_ERROR_STOP=1", "-qc", sql])
        guard result.status == 0 else { throw TestSupportError("ALTER TABLE failed: \(result.stderr)") }
    }
}

/// End to end: messages PostgreSQL refuses, and a registration with a NUL in its group, go to
/// their dead queues unchanged while the registry consumers go on and `/ready` stays 200.
extension RegistryBrokerSuites {
@Suite(.serialized, .enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct RefusedValueEndToEndTests {
    @Test func refusedValuesAreDeadLetteredAndTheRegistryIsNotHeld() async throws {
        let harness = try await RegistryHarness.start()
        try await RegistryRefusingDatabase.addRefusal(harness.registry)
        try await harness.withWorkers { workers in try await run(harness, workers[0]) }
    }

    func run(_ harness: RegistryHarness, _ worker: ChildProcess) async throws {
        let bundle = harness.bundles[0]
        try await waitUntil("the admin server listening", timeout: .seconds(60)) { RegistryHarness.adminPort(worker) != nil }
        let port = try #require(RegistryHarness.adminPort(worker))
        // Ready first (its queues declared, the registry reached): what must stay 200 is a
        // ready worker's answer while refused values arrive, not a starting one's.
        try await waitUntil("the worker ready", timeout: .seconds(60)) { try await Self.readyStatus(port) == 200 }
        let nulGroup = #"{"op":"register","bundleId":"\#(bundle)","token":"\#(RegistryHarness.token(1))","group":"a\u0000b","at":5}"#
        let refused = #"{"op":"register","bundleId":"\#(bundle)","token":"\#(RegistryHarness.token(2))","group":"\#(RegistryRefusingDatabase.refusedGroup)","at":5}"#
        let nulGroupJob = #"{"group":"a\u0000b","payload":{"aps":{"content-available":1}}}"#
        for body in [nulGroup, refused, nulGroup, refused] { try await harness.publish(TopologyNames.registry, body) }
        try await harness.publish(TopologyNames.groups, nulGroupJob)
        let valid = (10..<15).map(RegistryHarness.token)
        for token in valid { try await harness.register(bundle, token, group: "acct", at: 6) }
        var readyAnswers: [Int] = []
        try await waitUntil("the valid registrations applied and the refused ones dead", timeout: .seconds(120), every: .seconds(1)) {
            readyAnswers.append(try await Self.readyStatus(port))
            let applied = try await TestPostgres.storeValue(harness.registry) {
                try await $0.activeDevices(group: "acct", after: nil, limit: 10).count
            }
            let registryDead = try await harness.messageCount(TopologyNames.registryDead)
            let groupsDead = try await harness.messageCount(TopologyNames.groupsDead)
            return applied == valid.count && registryDead == 4 && groupsDead == 1
        }
        readyAnswers.append(try await Self.readyStatus(port))
        #expect(readyAnswers.allSatisfy { $0 == 200 }, "/ready answered \(readyAnswers)")
        var dead: [(body: String, error: String)] = []
        while let message = try await harness.connection.get(queue: TopologyNames.registryDead) {
            await harness.connection.ack(message)
            let headers = message.message.properties.headers ?? [:]
            #expect(headers[JobHeaders.reason]?.stringValue == "MalformedJob")
            dead.append((String(decoding: message.message.body, as: UTF8.self), headers[JobHeaders.error]?.stringValue ?? ""))
        }
        #expect(dead.map(\.body).sorted() == [nulGroup, nulGroup, refused, refused].sorted())
        #expect(dead.filter { $0.body == nulGroup }.allSatisfy { $0.error.hasPrefix("group: must not contain control characters") })
        #expect(dead.filter { $0.body == refused }.allSatisfy { $0.error.contains("SQLSTATE 23514") })
        let deadGroupJob = try #require(try await harness.connection.get(queue: TopologyNames.groupsDead))
        await harness.connection.ack(deadGroupJob)
        #expect(deadGroupJob.message.body == Array(nulGroupJob.utf8))
        #expect(!worker.log.contains("unavailable: registration and group consumers HELD"))
    }

    static func readyStatus(_ port: Int) async throws -> Int {
        let result = try await runProcess("/usr/bin/curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:\(port)/ready"])
        return Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }
}
}
