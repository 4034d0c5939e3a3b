import APNSSimulator
import Foundation
import Testing
import TestSupport

/// A database the worker cannot use at start-up (nobody listening, or one that refuses) stops
/// `apns-worker registry migrate` and `apns-worker run` with ONE line naming the file, the line
/// and the key, the password masked (contract §6, bad input).
@Suite(.enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct RegistryStartUpErrorTests {
    static let password = "s3cret-pw-\(UUID().uuidString.prefix(6))"

    /// A configuration `run` would accept but for its `[registry] url`, which stands on line 9.
    func writeConfig(url: String) throws -> String {
        let directory = NSTemporaryDirectory() + "apnsw-regerr-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = try SimulatorCredentials.generate(into: directory + "/credentials", teamID: "TEAM123456", keyID: "KEY1234567")
        let text = """
            [amqp]
            url = \(try TestBroker.require().amqpURL)
            [apns "com.example.app"]
            teamId = TEAM123456
            keyId = KEY1234567
            tokenKeyFile = credentials/AuthKey_KEY1234567.p8
            host = 127.0.0.1
            [registry]
            url = \(url)
            """
        let path = directory + "/worker.conf"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func expectOneLine(_ result: ProcessResult, path: String, cause: String) {
        #expect(result.status == 1)
        let lines = result.stderr.split(separator: "\n", omittingEmptySubsequences: true)
        #expect(lines.count == 1, "one line, got: \(result.stderr)")
        let line = String(lines.first ?? "")
        #expect(line.hasPrefix("\(path):9: [registry] url: cannot use PostgreSQL at "), "file, line and key: \(line)")
        #expect(line.contains(cause), "says why: \(line)")
        #expect(!line.contains(Self.password), "the password is masked: \(line)")
        #expect(!result.stdout.contains(Self.password))
    }

    @Test(arguments: [["run", "--config"], ["registry", "migrate", "--config"]])
    func nobodyListeningIsOneLineWithFileLineAndKey(command: [String]) async throws {
        let port = unreachablePort
        let path = try writeConfig(url: "postgres://apns:\(Self.password)@127.0.0.1:\(port)/apns?sslmode=disable")
        let result = try await runProcess(workerExecutable, command + [path])
        expectOneLine(result, path: path, cause: "connect")
    }

    @Test(arguments: [["run", "--config"], ["registry", "migrate", "--config"]])
    func refusingDatabaseIsOneLineWithTheReason(command: [String]) async throws {
        let port = try #require(TestPostgres.environment["APNS_TEST_POSTGRES_PORT"])
        let path = try writeConfig(url: "postgres://apns:\(Self.password)@127.0.0.1:\(port)/no_such_database?sslmode=disable")
        let result = try await runProcess(workerExecutable, command + [path])
        expectOneLine(result, path: path, cause: "does not exist")
    }
}
