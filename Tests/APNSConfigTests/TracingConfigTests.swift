import APNSConfig
import Foundation
import Testing

/// `[tracing]`: off by default, every key, environment overrides, and one-line errors that name
/// the file, line and key.
@Suite("tracing configuration")
struct TracingConfigTests {
    @Test func absentMeansOff() throws {
        #expect(try loadConfig(minimalConfig, in: try TempDirectory()).tracing == nil)
    }

    @Test func everyKey() throws {
        let text = minimalConfig + "\n[tracing]\nendpoint = https://otel.example:4318\nserviceName = push-eu\nsampleRatio = 0.25\nparentBased = true\n"
        let configuration = try loadConfig(text, in: try TempDirectory())
        let tracing = try #require(configuration.tracing)
        #expect(configuration.summaryLines.contains("tracing: OTLP/HTTP to https://otel.example:4318/v1/traces as push-eu, sampleRatio 0.25, parent-based"))
        #expect(tracing.endpoint == "https://otel.example:4318")
        #expect(tracing.tracesURL == "https://otel.example:4318/v1/traces")
        #expect(tracing.serviceName == "push-eu")
        #expect(tracing.sampleRatio == 0.25)
        #expect(tracing.parentBased)
    }

    @Test func defaultsAndEnvironmentAlone() throws {
        let directory = try TempDirectory()
        let configuration = try ConfigurationLoader.load(
            path: try directory.write("test.conf", minimalConfig),
            environment: ["APNS_WORKER_TRACING_ENDPOINT": "http://collector:4318/", "APNS_WORKER_TRACING_SAMPLERATIO": "0"],
            credentials: .skipFiles)
        let tracing = try #require(configuration.tracing)
        #expect(tracing.tracesURL == "http://collector:4318/v1/traces")
        #expect(tracing.serviceName == "apns-worker")
        #expect(tracing.sampleRatio == 0)
        #expect(!tracing.parentBased, "a producer's sampled flag is not followed unless the operator says so")
    }

    @Test func aURLWithAPathIsTakenAsTheTracesURL() {
        #expect(TracingSettings(endpoint: "http://gw:8080/otlp/v1/traces").tracesURL == "http://gw:8080/otlp/v1/traces")
        #expect(TracingSettings(endpoint: "http://gw:4318").tracesURL == "http://gw:4318/v1/traces")
    }

    @Test(arguments: [
        ("endpoint", "otel-collector:4318"), ("endpoint", "grpc://collector:4317"), ("endpoint", "http://"),
        ("endpoint", "http://user:secret@collector:4318"), ("endpoint", "http://collector:4318/?token=x"),
        ("endpoint", "http://collector:99999"), ("sampleRatio", "1.5"), ("sampleRatio", "-0.1"), ("sampleRatio", "nan"),
        ("sampleRatio", "half"), ("parentBased", "maybe"), ("serviceName", "a\u{7}b"),
    ])
    func aBadValueIsOneLineNamingFileLineAndKey(key: String, value: String) throws {
        let directory = try TempDirectory()
        var lines = ["[tracing]"]
        if key != "endpoint" { lines.append("endpoint = http://127.0.0.1:4318") }
        lines.append("\(key) = \(value)")
        let text = minimalConfig + "\n" + lines.joined(separator: "\n") + "\n"
        let error = try #require(try loadError(text, in: directory))
        let line = try #require(text.split(separator: "\n", omittingEmptySubsequences: false).firstIndex { $0.hasPrefix("\(key) = ") }) + 1
        #expect(error.description.hasPrefix("\(directory.path)/test.conf:\(line): [tracing] \(key): "), "\(error)")
        #expect(!error.description.contains("\n"))
        #expect(!error.description.contains("secret"))
    }

    @Test func aSectionWithoutEndpointNamesTheKey() throws {
        let error = try #require(try loadError(minimalConfig + "\n[tracing]\nsampleRatio = 0.5\n", in: try TempDirectory()))
        #expect(error.key == "endpoint")
        #expect(error.section == "[tracing]")
        let fromEnvironment = try #require(
            try loadError(minimalConfig, in: try TempDirectory(), environment: ["APNS_WORKER_TRACING_SAMPLERATIO": "0.5"]))
        #expect(fromEnvironment.key == "endpoint")
        #expect(fromEnvironment.description.contains("APNS_WORKER_TRACING_SAMPLERATIO"), "\(fromEnvironment)")
    }

    @Test func anUnknownKeyIsRefused() throws {
        let error = try #require(try loadError(minimalConfig + "\n[tracing]\nendpoint = http://c:4318\nexporter = grpc\n", in: try TempDirectory()))
        #expect(error.key == "exporter")
    }
}
