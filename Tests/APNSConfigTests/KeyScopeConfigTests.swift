/// Apple's key rules as configuration states them: `keyEnvironment` and `keyTopics` of an
/// `[apns "…"]` section, each section checked against its key, and keys checked across sections.
import APNSConfig
import APNSModel
import Foundation
import Testing

@Suite("configuration: token key scope")
struct KeyScopeConfigTests {
    @Test func aKeyWithoutScopeServesBothEnvironmentsAndEveryTopic() throws {
        let directory = try TempDirectory()
        let bundle = try #require(try loadConfig(minimalConfig, in: directory).bundles.first)
        #expect(bundle.keyScope == .unrestricted)
        #expect(bundle.keyScope.serves(.sandbox) && bundle.keyScope.serves(.production))
        #expect(bundle.keyScope.covers(topic: "com.example.app.voip"))
    }

    @Test func aTeamScopedKeyForTheBundlesEnvironmentLoads() throws {
        let directory = try TempDirectory()
        let text = minimalConfig + "\nenvironment = sandbox\nkeyEnvironment = Sandbox"
        let bundle = try #require(try loadConfig(text, in: directory).bundles.first)
        #expect(bundle.keyScope == TokenKeyScope(environment: .sandbox))
        #expect(!bundle.keyScope.serves(.production))
        #expect(bundle.keyScope.covers(topic: "com.example.app.voip"))
        let both = try #require(try loadConfig(minimalConfig + "\nkeyEnvironment = both", in: directory).bundles.first)
        #expect(both.keyScope == .unrestricted)
        #expect(try loadConfig(text, in: directory).summaryLines.last?.hasSuffix("2 connections, sandbox-only key") == true)
    }

    @Test func aTopicSpecificKeyKeepsItsTopics() throws {
        let directory = try TempDirectory()
        let text = minimalConfig + "\nkeyEnvironment = production\nkeyTopics = com.example.other, com.example.APP, com.example.app.voip"
        let bundle = try #require(try loadConfig(text, in: directory).bundles.first)
        #expect(bundle.keyScope.environment == .production)
        #expect(bundle.keyScope.topics == ["com.example.other", "com.example.APP", "com.example.app.voip"])
        #expect(bundle.keyScope.covers(topic: "com.example.app"))
        #expect(bundle.keyScope.covers(topic: "com.example.app.voip"))
        #expect(!bundle.keyScope.covers(topic: "com.example.app.complication"))
        // check-config says which kind of key each bundle has.
        #expect(try loadConfig(text, in: directory).summaryLines.last?.hasSuffix("2 connections, topic-specific production key (3 topics)") == true)
    }

    @Test func fourHundredTopicsAreApplesLimit() throws {
        let directory = try TempDirectory()
        let topics = ["com.example.app"] + (1..<400).map { "com.example.app\($0)" }
        let text = minimalConfig + "\nkeyEnvironment = production\nkeyTopics = " + topics.joined(separator: ", ")
        #expect(try loadConfig(text, in: directory).bundles.first?.keyScope.topics?.count == 400)
        let error = try #require(try loadError(text + ", com.example.one-too-many", in: directory))
        #expect(error.kind == .badValue)
        #expect(error.key == "keyTopics")
        #expect(error.location == .file(path: directory.path + "/test.conf", line: 9))
        #expect(error.description.hasSuffix("keyTopics: lists 401 topics; a topic-specific key has at most 400 (Apple's limit)"))
    }

    /// Text appended to `minimalConfig` (which ends on line 7); the expected line, section, key,
    /// kind and message, as in `LoaderTests.errors`.
    @Test(arguments: [
        ErrorCase("\nkeyEnvironment = staging", 9, appSection, "keyEnvironment", .badValue, "\"staging\" is not a key environment (sandbox, production or both)"),
        ErrorCase("\nkeyEnvironment = sandbox", 9, appSection, "keyEnvironment", .conflict, "a sandbox-only key cannot serve this bundle's environment, production (the default): Apple would refuse its notifications (BadEnvironmentKeyInToken)"),
        ErrorCase("\nenvironment = sandbox\nkeyEnvironment = production", 10, appSection, "keyEnvironment", .conflict, "a production-only key cannot serve this bundle's environment, sandbox (line 9)"),
        ErrorCase("\nkeyEnvironment = production\ndomain = sandbox.push.apple.com", 9, appSection, "keyEnvironment", .conflict, "cannot serve this bundle's environment, sandbox (line 10)"),
        ErrorCase("\nkeyTopics = com.example.app", 9, appSection, "keyTopics", .conflict, "a topic-specific key serves one environment: set keyEnvironment = sandbox or production, as the key was created"),
        ErrorCase("\nkeyEnvironment = both\nkeyTopics = com.example.app", 10, appSection, "keyTopics", .conflict, "a topic-specific key serves one environment"),
        ErrorCase("\nkeyEnvironment = production\nkeyTopics = com.example.app.voip, com.example.other", 10, appSection, "keyTopics", .conflict, "does not list this bundle's topic com.example.app: Apple would refuse its notifications (TopicDisallowed)"),
        ErrorCase("\nkeyEnvironment = sandbox\nenvironment = sandbox\nkeyTopics = com.example.other", 11, appSection, "keyTopics", .conflict, "does not list this bundle's topic com.example.app"),
        ErrorCase("\nkeyEnvironment = production\nkeyTopics = com.example.app, com.example.APP", 10, appSection, "keyTopics", .badValue, "lists \"com.example.APP\" twice"),
        ErrorCase("\nkeyEnvironment = production\nkeyTopics = \"\"", 10, appSection, "keyTopics", .badValue, "is empty: list the key's topics"),
        ErrorCase("\nkeyEnvironment = production\nkeyTopics = com.example.app,,x", 10, appSection, "keyTopics", .badValue, "has an empty item"),
        ErrorCase("\nkeyEnvironment = production\nkeyTopics = com.example.app, com.example app", 10, appSection, "keyTopics", .badValue, "\"com.example app\" is not a topic"),
        ErrorCase("\nkeyEnvironment = production\nkeyTopics = com.example.app, .voip", 10, appSection, "keyTopics", .badValue, "\".voip\" is not a topic"),
        ErrorCase("\n[apns \"com.example.cert\"]\ncertFile = c\nkeyFile = k\nkeyTopics = com.example.cert\nkeyEnvironment = sandbox", 12, "[apns \"com.example.cert\"]", "keyTopics", .conflict, "only applies to token auth (teamId, keyId, tokenKeyFile)"),
        // The same key in two sections is one key: one scope.
        ErrorCase("\nkeyEnvironment = production\n[apns \"com.example.two\"]\nteamId = TEAM123456\nkeyId = KEY1234567\ntokenKeyFile = k.p8", 12, "[apns \"com.example.two\"]", "keyId", .conflict, "key KEY1234567 of team TEAM123456 is described differently in [apns \"com.example.app\"] (line 4): one key has one scope"),
        ErrorCase("\nkeyEnvironment = production\nkeyTopics = com.example.app, com.example.two\n[apns \"com.example.two\"]\nteamId = TEAM123456\nkeyId = KEY1234567\ntokenKeyFile = k.p8\nkeyEnvironment = production\nkeyTopics = com.example.two", 15, "[apns \"com.example.two\"]", "keyEnvironment", .conflict, "is described differently in [apns \"com.example.app\"] (line 4)"),
        // Apple issues at most two team-scoped keys per team and environment.
        ErrorCase(teamKeySections(keys: ["KEYA000001", "KEYB000002", "KEYC000003"], scope: "keyEnvironment = production"), 23, "[apns \"com.example.b3\"]", "keyEnvironment", .conflict, "key KEYC000003 is a third production team-scoped key of team TEAM123456 (after KEYA000001, KEYB000002); Apple issues at most 2 per environment"),
    ])
    func errors(_ testCase: ErrorCase) throws {
        let directory = try TempDirectory()
        let text = minimalConfig + "\n" + testCase.text
        let error = try #require(try loadError(text, in: directory))
        let path = directory.path + "/test.conf"
        #expect(error.kind == testCase.kind, "\(error)")
        #expect(error.location == .file(path: path, line: testCase.line), "\(error)")
        #expect(error.section == testCase.section)
        #expect(error.key == testCase.key)
        let prefix = "\(path):\(testCase.line ?? 0): \(testCase.section ?? "") \(testCase.key ?? ""): "
        #expect(error.description.hasPrefix(prefix), "\(error)")
        #expect(error.description.dropFirst(prefix.count).contains(testCase.message), "\(error)")
        #expect(!error.description.contains("\n"))
    }

    @Test func sectionsSharingAKeyWithOneScopeLoad() throws {
        let directory = try TempDirectory()
        let text = minimalConfig + """

            keyEnvironment = production
            keyTopics = com.example.app, com.example.two
            [apns "com.example.two"]
            teamId = TEAM123456
            keyId = KEY1234567
            tokenKeyFile = k.p8
            keyEnvironment = PRODUCTION
            keyTopics = com.example.TWO, com.example.app
            """
        let bundles = try loadConfig(text, in: directory).bundles
        #expect(bundles.map(\.keyScope.environment) == [.production, .production])
    }

    @Test func twoTeamScopedKeysPerEnvironmentAndTeamLoad() throws {
        let directory = try TempDirectory()
        // Two production keys of one team, and a third of another team: within Apple's limits.
        var text = minimalConfig + "\n" + Self.sections(keys: ["KEYA000001", "KEYB000002"], scope: "keyEnvironment = production")
        text += "\n[apns \"com.other.app\"]\nteamId = TEAM654321\nkeyId = KEYC000003\ntokenKeyFile = k.p8\nkeyEnvironment = production"
        #expect(try loadConfig(text, in: directory).bundles.count == 4)
    }

    @Test func twoHundredTopicSpecificKeysPerEnvironmentAndTeamLoadAndOneMoreDoesNot() throws {
        let directory = try TempDirectory()
        let keys = (1...201).map { String(format: "TOPIC%05d", $0) }
        let within = minimalConfig + "\n" + Self.sections(keys: Array(keys.prefix(200)), scope: "keyEnvironment = sandbox\nenvironment = sandbox", topics: true)
        #expect(try loadConfig(within, in: directory).bundles.count == 201)
        // The same 200 in production as well: the limit is per environment.
        let bothEnvironments = within + "\n" + Self.sections(keys: keys.prefix(200).map { "P" + $0.dropFirst() }, scope: "keyEnvironment = production", topics: true, bundlePrefix: "p")
        #expect(try loadConfig(bothEnvironments, in: directory).bundles.count == 401)
        let beyond = minimalConfig + "\n" + Self.sections(keys: keys, scope: "keyEnvironment = sandbox\nenvironment = sandbox", topics: true)
        let error = try #require(try loadError(beyond, in: directory))
        #expect(error.kind == .conflict)
        #expect(error.section == "[apns \"com.example.b201\"]")
        #expect(error.key == "keyTopics")
        #expect(error.description.hasSuffix("keyTopics: key TOPIC00201 is topic-specific key number 201 of team TEAM123456 in sandbox; Apple issues at most 200 per environment"))
    }

    /// One section per key, `com.example.b1`, `…b2`, …, each of team TEAM123456 with `scope`
    /// (and, with `topics`, a topic-specific key for its own bundle). Appended to `minimalConfig`
    /// after a blank line 8, five lines each: the n-th header is line 9 + 5 (n − 1).
    static func sections(keys: [String], scope: String, topics: Bool = false, bundlePrefix: String = "b") -> String {
        keys.enumerated().map { index, key in
            var lines = ["[apns \"com.example.\(bundlePrefix)\(index + 1)\"]", "teamId = TEAM123456", "keyId = \(key)", "tokenKeyFile = k.p8", scope]
            if topics { lines.append("keyTopics = com.example.\(bundlePrefix)\(index + 1)") }
            return lines.joined(separator: "\n")
        }.joined(separator: "\n")
    }
}

private let appSection = "[apns \"com.example.app\"]"
private func teamKeySections(keys: [String], scope: String) -> String {
    "\n" + KeyScopeConfigTests.sections(keys: keys, scope: scope)
}
