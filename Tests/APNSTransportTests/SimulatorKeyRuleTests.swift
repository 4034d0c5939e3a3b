/// The simulator holds provider tokens to Apple's key rules over real TLS + HTTP/2 (the Python h2
/// client): keys limited to one environment, topic-specific keys, bundles of several teams, one
/// team per connection; and the limits and `--key` form it starts with.
import APNSModel
import Crypto
import Foundation
import TestSupport
import Testing

@testable import APNSSimulator

private typealias Env = SimulatorTestEnvironment

/// A provider token key made in the test: a P-256 key with Apple's team and key IDs.
private struct TestKey {
    var teamID: String
    var keyID: String
    var privateKey = P256.Signing.PrivateKey()

    init(_ teamID: String, _ keyID: String) {
        self.teamID = teamID
        self.keyID = keyID
    }

    func simulatorKey(environment: APNSEnvironment? = nil, topics: [String]? = nil) -> SimulatorTokenKey {
        SimulatorTokenKey(keyID: keyID, teamID: teamID, publicKey: privateKey.publicKey, environment: environment, topics: topics)
    }

    /// An ES256 provider token, as the worker's signer makes one.
    func token() throws -> String {
        let header = "{\"alg\":\"ES256\",\"kid\":\"\(keyID)\"}"
        let claims = "{\"iss\":\"\(teamID)\",\"iat\":\(Int64(Date().timeIntervalSince1970))}"
        let input = Base64URL.encode(header.utf8) + "." + Base64URL.encode(claims.utf8)
        return input + "." + Base64URL.encode(try privateKey.signature(for: Array(input.utf8)).rawRepresentation)
    }

    /// A request for one device with this key's token.
    func request(topic: String = Env.bundle, pushType: String = "alert") throws -> H2Request {
        H2Request(
            path: "/3/device/\(Env.deviceToken())",
            headers: [["authorization", "bearer \(try token())"], ["apns-topic", topic], ["apns-push-type", pushType]],
            body: #"{"aps":{"alert":"x"}}"#)
    }
}

@Suite("Simulator: Apple's key rules")
struct SimulatorKeyRuleTests {
    private func answers(_ result: H2Result) -> [String] {
        result.streamIDs.indices.map { index in
            let response = result.response(index)
            return "\(response?.status ?? 0) \(response?.reason ?? "-")"
        }
    }

    @Test("a key limited to one environment: the other environment answers 403 BadEnvironmentKeyInToken")
    func keyEnvironment() async throws {
        let sandboxOnly = TestKey("TEAM123456", "SANDBOX001"), productionOnly = TestKey("TEAM123456", "PRODUCT001")
        let both = TestKey("TEAM123456", "BOTHENV001")
        for environment in APNSEnvironment.allCases {
            try await Env.withSimulator({
                $0.environment = environment
                $0.tokenKeys = [
                    sandboxOnly.simulatorKey(environment: .sandbox), productionOnly.simulatorKey(environment: .production),
                    both.simulatorKey(),
                ]
            }) { simulator in
                // One connection per key: each is its first token there.
                let results = try await PythonH2.run(
                    port: simulator.port,
                    [sandboxOnly, productionOnly, both].map { H2Connection(requests: [try $0.request()]) })
                let refused = "403 BadEnvironmentKeyInToken"
                let expected = environment == .production ? [refused, "200 -", "200 -"] : ["200 -", refused, "200 -"]
                #expect(results.flatMap(answers) == expected, "\(environment)")
                #expect(simulator.counters().count(.badEnvironmentKeyInToken) == 1)
            }
        }
    }

    @Test("a topic-specific key serves its topics only: another topic is 400 TopicDisallowed")
    func topicSpecificKey() async throws {
        let key = TestKey("TEAM123456", "TOPICKEY01")
        try await Env.withSimulator({
            $0.tokenKeys = [key.simulatorKey(environment: .production, topics: ["com.example.app", "COM.example.app.voip"])]
        }) { simulator in
            let requests = [
                try key.request(), try key.request(topic: "com.example.app.voip", pushType: "voip"),
                try key.request(topic: "com.example.app.complication", pushType: "complication"),
                try key.request(topic: Env.legacyBundle),
            ]
            // One connection each: tokens signed a second apart differ, and one connection would
            // count that as a token update.
            let results = try await PythonH2.run(port: simulator.port, requests.map { H2Connection(requests: [$0]) })
            #expect(results.flatMap(answers) == ["200 -", "200 -", "400 TopicDisallowed", "400 TopicDisallowed"])
        }
    }

    @Test("channel management: a topic-specific key manages the channels of the bundles it lists only")
    func topicSpecificKeyOnChannelManagement() async throws {
        let key = TestKey("TEAM123456", "TOPICKEY02")
        try await Env.withSimulator({
            $0.channelPort = 0
            $0.tokenKeys = [key.simulatorKey(environment: .production, topics: [Env.legacyBundle])]
        }) { simulator in
            let port = try #require(simulator.channelPort)
            let requests = try [Env.legacyBundle, Env.bundle].map { bundle in
                H2Request(path: "/1/apps/\(bundle)/all-channels", method: "GET", headers: [["authorization", "bearer \(try key.token())"]])
            }
            let results = try await PythonH2.run(port: port, requests.map { H2Connection(requests: [$0]) })
            #expect(results.flatMap(answers) == ["200 -", "400 TopicDisallowed"])
        }
    }

    @Test("bundles of several teams: a token for another team's bundle is 400 TopicDisallowed")
    func severalTeams() async throws {
        let teamA = TestKey("TEAM123456", "KEYA000001"), teamB = TestKey("TEAM654321", "KEYB000001")
        try await Env.withSimulator({
            $0.bundleIDs = [Env.bundle, "com.other.app"]
            $0.bundleTeams = [Env.bundle: teamA.teamID, "com.other.app": teamB.teamID]
            $0.tokenKeys = [teamA.simulatorKey(), teamB.simulatorKey()]
        }) { simulator in
            let results = try await PythonH2.run(
                port: simulator.port,
                [
                    try teamA.request(), try teamB.request(topic: "com.other.app"),
                    try teamB.request(), try teamA.request(topic: "com.other.app"),
                ].map { H2Connection(requests: [$0]) })
            #expect(results.flatMap(answers) == ["200 -", "200 -", "400 TopicDisallowed", "400 TopicDisallowed"])
            #expect(
                Set(simulator.accepted().map(\.authentication))
                    == [.token(keyID: "KEYA000001", teamID: "TEAM123456"), .token(keyID: "KEYB000001", teamID: "TEAM654321")])
        }
    }

    @Test("one team per connection: another team's token on it is 403 UnrelatedKeyIdInToken, however late")
    func oneTeamPerConnection() async throws {
        let teamA1 = TestKey("TEAM123456", "KEYA000001"), teamA2 = TestKey("TEAM123456", "KEYA000002")
        let teamB = TestKey("TEAM654321", "KEYB000001")
        let keys = [teamA1.simulatorKey(), teamA2.simulatorKey(), teamB.simulatorKey()]
        // Without an update limit: a second key of the same team is taken, another team never is.
        try await Env.withSimulator({
            $0.tokenKeys = keys
            $0.minimumTokenUpdateInterval = .zero
        }) { simulator in
            let results = try await PythonH2.run(
                port: simulator.port,
                [
                    H2Connection(
                        requests: [try teamA1.request(), try teamA2.request(), try teamB.request(), try teamA1.request()],
                        sequential: true),
                    // The same team B token first on a connection of its own: accepted.
                    H2Connection(requests: [try teamB.request()]),
                ])
            #expect(answers(results[0]) == ["200 -", "200 -", "403 UnrelatedKeyIdInToken", "200 -"])
            #expect(answers(results[1]) == ["200 -"])
        }
        // With Apple's 20-minute limit: a new key of the same team is an update, too soon; another
        // team's key is not an update but a second team.
        try await Env.withSimulator({ $0.tokenKeys = keys }) { simulator in
            let results = try await PythonH2.run(
                port: simulator.port,
                [H2Connection(requests: [try teamA1.request(), try teamA2.request(), try teamB.request()], sequential: true)])
            #expect(answers(results[0]) == ["200 -", "429 TooManyProviderTokenUpdates", "403 UnrelatedKeyIdInToken"])
        }
    }

    @Test("keys beyond Apple's limits are refused at start, in one line")
    func limits() throws {
        func keys(_ count: Int, environment: APNSEnvironment?, topics: [String]? = nil, team: String = "TEAM123456") -> [SimulatorTokenKey] {
            (0..<count).map { TestKey(team, String(format: "KEY%07d", $0)).simulatorKey(environment: environment, topics: topics) }
        }
        func problem(_ keys: [SimulatorTokenKey]) -> String? {
            do {
                try AppleRules.checkKeys(keys)
                return nil
            } catch {
                return error.description
            }
        }
        #expect(problem(keys(2, environment: .sandbox) + keys(5, environment: nil).map { var key = $0; key.keyID += "B"; return key }) == nil)
        #expect(problem(keys(3, environment: .sandbox)) == "team TEAM123456 has more than 2 team-scoped keys in sandbox")
        #expect(problem(keys(2, environment: .sandbox) + keys(2, environment: .sandbox, team: "TEAM654321").map { var key = $0; key.keyID += "B"; return key }) == nil)
        #expect(problem(keys(200, environment: .production, topics: ["com.example.app"])) == nil)
        #expect(problem(keys(201, environment: .production, topics: ["com.example.app"])) == "team TEAM123456 has more than 200 topic-specific keys in production")
        let fourHundred = (0..<400).map { "com.example.app\($0)" }
        #expect(problem(keys(1, environment: .production, topics: fourHundred)) == nil)
        #expect(problem(keys(1, environment: .production, topics: fourHundred + ["one.more"])) == "key KEY0000000 lists 401 topics; Apple allows 1 to 400")
        #expect(problem(keys(1, environment: nil, topics: ["com.example.app"])) == "key KEY0000000 has topics but no environment: a topic-specific key serves one")
        #expect(problem(keys(1, environment: nil) + keys(1, environment: .sandbox)) == "key KEY0000000 is given twice")
    }

    @Test("--key TEAM:KEYID:FILE[:environment[:topics]] reads a .p8 or a public key")
    func keySpec() throws {
        let directory = NSTemporaryDirectory() + "apnsw-keyspec-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let privateKey = P256.Signing.PrivateKey()
        let p8 = directory + "/AuthKey_KEYB000001.p8", publicPEM = directory + "/public.pem"
        try Data(privateKey.pemRepresentation.utf8).write(to: URL(fileURLWithPath: p8))
        try Data(privateKey.publicKey.pemRepresentation.utf8).write(to: URL(fileURLWithPath: publicPEM))

        let full = try SimulatorKeySpec.parse("TEAM654321:KEYB000001:\(p8):Sandbox:com.other.app, com.other.app.voip")
        #expect(full == SimulatorKeySpec(teamID: "TEAM654321", keyID: "KEYB000001", path: p8, environment: .sandbox, topics: ["com.other.app", "com.other.app.voip"]))
        let loaded = try full.load()
        #expect(loaded.publicKey.rawRepresentation == privateKey.publicKey.rawRepresentation)
        #expect(loaded.environment == .sandbox && loaded.topics == ["com.other.app", "com.other.app.voip"])
        let fromPublic = try SimulatorKeySpec.parse("TEAM654321:KEYB000001:\(publicPEM)").load()
        #expect(fromPublic.publicKey.rawRepresentation == privateKey.publicKey.rawRepresentation && fromPublic.environment == nil)
        #expect(try SimulatorKeySpec.parse("TEAM654321:KEYB000001:\(p8):both").environment == nil)

        for (text, message) in [
            ("TEAM654321:KEYB000001", "use TEAM:KEYID:FILE"),
            ("team:KEYB000001:\(p8)", "\"team\" is not a team ID"),
            ("TEAM654321:KEY:\(p8)", "\"KEY\" is not a key ID"),
            ("TEAM654321:KEYB000001:\(p8):staging", "\"staging\" is not sandbox, production or both"),
            ("TEAM654321:KEYB000001:\(p8):sandbox:a,,b", "an empty topic"),
            ("TEAM654321:KEYB000001::sandbox", "no key file"),
        ] {
            #expect(throws: SimulatorKeySpec.Problem.self) { try SimulatorKeySpec.parse(text) }
            do {
                _ = try SimulatorKeySpec.parse(text)
            } catch {
                #expect(error.description.contains(message), "\(error)")
            }
        }
        #expect(throws: SimulatorKeySpec.Problem.self) { try SimulatorKeySpec.parse("TEAM654321:KEYB000001:\(directory)/missing.p8").load() }
    }
}
