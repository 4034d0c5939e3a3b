import AMQPClient
import APNSConfig
import APNSModel
import APNSTopology
import Foundation
import Testing

/// `[registry]` (contract §6): keys, defaults, environment overrides, and one-line errors that
/// name the file, line and key and never print the password.
@Suite("registry configuration")
struct RegistryConfigTests {
    @Test func absentMeansNoRegistryAndNoRegistryQueues() throws {
        let directory = try TempDirectory()
        let configuration = try loadConfig(minimalConfig, in: directory)
        #expect(configuration.registry == nil)
        #expect(!configuration.topologyPlan.queues.contains { $0.name.hasPrefix("apns.registry") || $0.name.hasPrefix("apns.groups") })
    }

    @Test func everyKeyAndTheTopology() throws {
        let text = minimalConfig + "\n[registry]\nurl = postgres://apns:secret@127.0.0.1:5442/apns?sslmode=disable\npoolSize = 3\ncountsFlushInterval = 250ms\nsyncWindow = 2s"
        let directory = try TempDirectory()
        let configuration = try loadConfig(text, in: directory)
        let registry = try #require(configuration.registry)
        #expect(registry.url.port == 5442)
        #expect(registry.url.password == "secret")
        #expect(registry.poolSize == 3)
        #expect(registry.countsFlushInterval == .milliseconds(250))
        #expect(registry.syncWindow == .seconds(2))
        let names = Set(configuration.topologyPlan.queues.map(\.name))
        #expect(names.isSuperset(of: ["apns.registry", "apns.groups", "apns.registry.dead", "apns.groups.dead"]))
        #expect(configuration.topologyPlan.exchanges.contains { $0.name == "apns.groups" && $0.kind == .fanout })
    }

    @Test func defaultsAndEnvironmentAlone() throws {
        let directory = try TempDirectory()
        let configuration = try ConfigurationLoader.load(
            path: try directory.write("test.conf", minimalConfig),
            environment: ["APNS_WORKER_REGISTRY_URL": "postgresql://u:p@db/apns", "APNS_WORKER_REGISTRY_POOLSIZE": "2"],
            credentials: .skipFiles)
        let registry = try #require(configuration.registry)
        #expect(registry.url.host == "db")
        #expect(registry.url.port == 5432)
        #expect(registry.poolSize == 2)
        #expect(registry.countsFlushInterval == .seconds(5))
        #expect(registry.syncWindow == .seconds(30))
    }

    @Test func syncWindowZeroIsOffAndOutOfRangeNamesTheKey() throws {
        let base = minimalConfig + "\n[registry]\nurl = postgres://apns:p@127.0.0.1/apns\n"
        let off = try #require(try loadConfig(base + "syncWindow = 0", in: try TempDirectory()).registry)
        #expect(off.syncWindow == .zero)
        for bad in ["2h", "soon"] {
            let error = try #require(try loadError(base + "syncWindow = \(bad)", in: try TempDirectory()))
            #expect(error.key == "syncWindow", "\(error)")
            #expect(error.section == "[registry]")
        }
    }

    @Test func badURLIsOneLineWithFileLineKeyAndNoPassword() throws {
        let directory = try TempDirectory()
        let text = minimalConfig + "\n[registry]\nurl = postgres://apns:hunter2@/apns"
        let error = try #require(try loadError(text, in: directory))
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        let line = try #require(lines.firstIndex { $0.hasPrefix("url = postgres") }) + 1
        #expect(error.description.hasPrefix("\(directory.path)/test.conf:\(line): [registry] url: "), "\(error)")
        #expect(!error.description.contains("hunter2"))
        #expect(error.description.contains("apns:***@"))
        #expect(!error.description.contains("\n"))
    }

    @Test func sectionWithoutURLNamesTheKey() throws {
        let directory = try TempDirectory()
        let error = try #require(try loadError(minimalConfig + "\n[registry]\npoolSize = 2", in: directory))
        #expect(error.key == "url")
        #expect(error.section == "[registry]")
    }
}
