/// `apns-worker channels create|list|show|delete` (contract §7) as operators run it: the real
/// executable against the simulator's channel management service, configured through the
/// bundle's `channelHost`/`channelPort`, plain and `--json` output, Apple's refusal as one line.
import APNSModel
import APNSSimulator
import Foundation
import Testing
import TestSupport

@Suite(.enabled(if: FileManager.default.isExecutableFile(atPath: workerExecutable)))
struct ChannelsCLITests {
    func configFile(channelPort: Int) throws -> String {
        let credentials = SimulatorTestEnvironment.credentials
        let path = NSTemporaryDirectory() + uniqueName("channels-cli") + ".conf"
        let config = """
            [amqp]
            url = amqp://guest:guest@127.0.0.1:1/%2f

            [apns "\(SimulatorTestEnvironment.bundle)"]
            environment = sandbox
            teamId = \(credentials.teamID)
            keyId = \(credentials.keyID)
            tokenKeyFile = \(credentials.tokenKeyPath)
            host = 127.0.0.1
            port = 1
            caFile = \(credentials.caCertificatePath)
            channelHost = 127.0.0.1
            channelPort = \(channelPort)

            """
        try config.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func cli(_ arguments: [String], config: String) async throws -> ProcessResult {
        try await runProcess(workerExecutable, ["channels"] + arguments + ["--config", config, "--bundle", SimulatorTestEnvironment.bundle])
    }

    func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test func createListShowAndDelete() async throws {
        try await SimulatorTestEnvironment.withSimulator({ $0.channelPort = 0 }) { simulator in
            let config = try configFile(channelPort: try #require(simulator.channelPort))
            defer { try? FileManager.default.removeItem(atPath: config) }

            let created = try await cli(["create", "--storage-policy", "1"], config: config)
            #expect(created.status == 0, "\(created.stderr)")
            let channel = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(BroadcastChannel(id: channel) != nil)
            #expect(simulator.channels().map(\.id) == [channel])

            let createdJSON = try await cli(["create", "--json"], config: config)
            #expect(createdJSON.status == 0, "\(createdJSON.stderr)")
            let second = try json(createdJSON.stdout)
            #expect(second["bundleId"] as? String == SimulatorTestEnvironment.bundle)
            #expect(second["environment"] as? String == "sandbox")
            #expect(second["storagePolicy"] as? Int == 0)
            let secondID = try #require(second["channel"] as? String)

            let list = try await cli(["list"], config: config)
            #expect(list.status == 0)
            #expect(Set(list.stdout.split(separator: "\n").map(String.init)) == [channel, secondID])
            let listJSON = try json(try await cli(["list", "--json"], config: config).stdout)
            #expect(Set(listJSON["channels"] as? [String] ?? []) == [channel, secondID])

            let show = try await cli(["show", "--channel", channel], config: config)
            #expect(show.status == 0)
            #expect(show.stdout == "\(channel) storagePolicy 1 (most recent message stored)\n")
            let showJSON = try json(try await cli(["show", "--channel", channel, "--json"], config: config).stdout)
            #expect(showJSON["storagePolicy"] as? Int == 1 && showJSON["channel"] as? String == channel)

            let deleted = try await cli(["delete", "--channel", channel], config: config)
            #expect(deleted.status == 0)
            #expect(deleted.stdout == "deleted \(channel)\n")
            #expect(simulator.channels().map(\.id) == [secondID])

            // Apple's refusal, as it is, on one line; exit 1.
            let gone = try await cli(["show", "--channel", channel], config: config)
            #expect(gone.status == 1)
            #expect(gone.stdout.isEmpty)
            #expect(gone.stderr == "apns-worker channels: APNs answered 404 ChannelNotRegistered\n")
        }
    }

    @Test func badArgumentsAreRefusedBeforeAnyRequest() async throws {
        let config = try configFile(channelPort: 1)
        defer { try? FileManager.default.removeItem(atPath: config) }
        let badChannel = try await cli(["show", "--channel", "not base64!"], config: config)
        #expect(badChannel.status != 0)
        #expect(badChannel.stderr.contains("--channel has a character outside base64"))
        let badPolicy = try await cli(["create", "--storage-policy", "2"], config: config)
        #expect(badPolicy.status != 0)
        #expect(badPolicy.stderr.contains("--storage-policy must be 0 or 1"))
        let unknown = try await runProcess(workerExecutable, ["channels", "list", "--config", config, "--bundle", "com.example.other"])
        #expect(unknown.status != 0)
        #expect(unknown.stderr.contains("has no http2 bundle com.example.other"))
    }
}
