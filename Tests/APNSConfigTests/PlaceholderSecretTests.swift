import APNSConfig
import Foundation
import Testing

/// The placeholder tokens the examples ship (`REPLACE-ME` in the Kubernetes example
/// Secret, `changeme`, config/apns-worker.conf's example token) are refused as the admin token,
/// as one line naming file and line (or environment variable) and key; and `[admin]
/// metricsToken`, the read-only credential for /metrics, is validated like the admin token.
@Suite("placeholder secrets and the metrics token")
struct PlaceholderSecretTests {
    /// The values the Kubernetes example Secret shipped (`REPLACE-ME-with-a-long-random-token`)
    /// and config/apns-worker.conf shows, and the usual "change me" spellings.
    static let placeholderTokens = [
        "REPLACE-ME-with-a-long-random-token", "replace_me_0123456789abcdef", "changeme-changeme-changeme",
        "0123456789-CHANGE-ME", "a-long-random-string-from-your-secret-store",
    ]

    @Test(arguments: placeholderTokens)
    func aPlaceholderAdminTokenInTheFileIsRefused(token: String) throws {
        let directory = try TempDirectory()
        let error = try #require(try loadError(minimalConfig + "\n[admin]\ntoken = \(token)", in: directory))
        #expect(error.kind == .badValue)
        #expect(error.description.hasPrefix("\(directory.path)/test.conf:9: [admin] token: "), "\(error)")
        #expect(error.description.contains("set a real secret"))
        #expect(!error.description.contains("\n"))
    }

    @Test func aPlaceholderAdminTokenFromTheEnvironmentIsRefused() throws {
        let directory = try TempDirectory()
        let error = try #require(
            try loadError(minimalConfig, in: directory, environment: ["APNS_WORKER_ADMIN_TOKEN": "REPLACE-ME-with-a-long-random-token"]))
        #expect(error.description.hasPrefix("environment APNS_WORKER_ADMIN_TOKEN: [admin] token: holds the placeholder \"replace-me\""), "\(error)")
    }

    @Test func realSecretsPass() throws {
        let directory = try TempDirectory()
        let configuration = try loadConfig(
            minimalConfig + "\n[admin]\ntoken = q8Vw3nZ1rT6yK0pL2mXc\nmetricsToken = b7Hs9dF4gJ2kL5qW8eRt\n[registry]\nurl = postgres://apns:apns@127.0.0.1:5432/apns",
            in: directory)
        #expect(configuration.admin.token == "q8Vw3nZ1rT6yK0pL2mXc")
        #expect(configuration.admin.metricsToken == "b7Hs9dF4gJ2kL5qW8eRt")
        #expect(configuration.summaryLines.contains { $0.contains("bearer token set, metrics token set") })
    }

    @Test func theMetricsTokenIsCheckedLikeTheAdminToken() throws {
        let directory = try TempDirectory()
        let fromEnvironment = try loadConfig(
            minimalConfig + "\n[admin]\ntoken = q8Vw3nZ1rT6yK0pL2mXc", in: directory,
            environment: ["APNS_WORKER_ADMIN_METRICSTOKEN": "b7Hs9dF4gJ2kL5qW8eRt"])
        #expect(fromEnvironment.admin.metricsToken == "b7Hs9dF4gJ2kL5qW8eRt")
        let cases: [(String, String)] = [
            ("\n[admin]\ntoken = q8Vw3nZ1rT6yK0pL2mXc\nmetricsToken = short", ":10: [admin] metricsToken: must be at least 16 printable ASCII characters"),
            ("\n[admin]\ntoken = q8Vw3nZ1rT6yK0pL2mXc\nmetricsToken = REPLACE-ME-metrics-token", ":10: [admin] metricsToken: holds the placeholder \"replace-me\""),
            ("\n[admin]\nmetricsToken = b7Hs9dF4gJ2kL5qW8eRt", ":9: [admin] metricsToken: needs token"),
            ("\n[admin]\ntoken = q8Vw3nZ1rT6yK0pL2mXc\nmetricsToken = q8Vw3nZ1rT6yK0pL2mXc", ":10: [admin] metricsToken: is the admin token"),
        ]
        for (text, expected) in cases {
            let error = try #require(try loadError(minimalConfig + text, in: directory))
            #expect(error.description.hasPrefix("\(directory.path)/test.conf\(expected)"), "\(error)")
        }
    }
}
