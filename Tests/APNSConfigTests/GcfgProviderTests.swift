import APNSConfig
import Configuration
import Testing

@Suite("gcfg provider")
struct GcfgProviderTests {
    @Test func servesGlobalSectionsThroughAConfigReader() throws {
        let document = try ConfigDocument.parse(
            """
            [AMQP]
            URL = amqp://a/
            url =
            url = amqp://b/
            url = amqp://c/
            [Retry]
            MaxAttempts = 4
            flag
            [apns "com.example.app"]
            teamId = TEAM123456
            """, path: "p.conf")
        let provider = GcfgProvider(document: document)
        let reader = ConfigReader(provider: provider)
        #expect(reader.string(forKey: ConfigKey(["retry", "maxattempts"])) == "4")
        #expect(reader.string(forKey: ConfigKey(["RETRY", "MAXATTEMPTS"])) == "4")
        #expect(reader.string(forKey: ConfigKey(["retry", "flag"])) == "true")
        #expect(reader.stringArray(forKey: ConfigKey(["amqp", "url"])) == ["amqp://b/", "amqp://c/"])
        #expect(provider.entries(section: "amqp", key: "url").map(\.line) == [4, 5])
        // Bundle subsections are read from the document, not served by the provider.
        #expect(reader.string(forKey: ConfigKey(["apns", "com.example.app", "teamid"])) == nil)
        #expect(throws: GcfgProviderTypeError.self) {
            try provider.value(forKey: AbsoluteConfigKey(["retry", "maxattempts"]), type: .int)
        }
    }

    @Test func environmentOverridesWinInTheLayeredReader() throws {
        let document = try ConfigDocument.parse("[retry]\nmaxAttempts = 4\n", path: "p.conf")
        let environment = KeyMappingProvider(
            upstream: EnvironmentVariablesProvider(environmentVariables: ["APNS_WORKER_RETRY_MAXATTEMPTS": "9"])
        ) { key in AbsoluteConfigKey(["apns", "worker"] + key.components) }
        let reader = ConfigReader(providers: [environment, GcfgProvider(document: document)])
        #expect(reader.string(forKey: ConfigKey(["retry", "maxattempts"])) == "9")
        #expect(ConfigurationLoader.environmentVariable(section: "retry", key: "maxAttempts") == "APNS_WORKER_RETRY_MAXATTEMPTS")
    }
}
