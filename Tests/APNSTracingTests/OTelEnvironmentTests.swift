import APNSConfig
import APNSSimulator
import Foundation
import Testing
import TestSupport

/// An `OTEL_*` value swift-otel cannot serve (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc` reached
/// its `fatalError` at start-up) is one configuration error naming the variable, from
/// `check-config` and `run` alike, and only when tracing is on.
@Suite struct OTelEnvironmentTests {
    @Test(arguments: [
        (["OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"], "OTEL_EXPORTER_OTLP_PROTOCOL", "\"grpc\" is not supported: this build exports OTLP over HTTP only"),
        (["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"], "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "\"grpc\""),
        (["OTEL_EXPORTER_OTLP_PROTOCOL": "HTTP/PROTOBUF"], "OTEL_EXPORTER_OTLP_PROTOCOL", "use http/protobuf, http/json"),
        (["OTEL_TRACES_SAMPLER": "jaeger_remote"], "OTEL_TRACES_SAMPLER", "\"jaeger_remote\" is not supported: not a sampler"),
        (["OTEL_TRACES_SAMPLER": "xray"], "OTEL_TRACES_SAMPLER", "\"xray\""),
        (["OTEL_PROPAGATORS": "tracecontext,b3"], "OTEL_PROPAGATORS", "\"b3\" is not supported: this build propagates W3C trace context only"),
        (["OTEL_PROPAGATORS": "baggage"], "OTEL_PROPAGATORS", "\"baggage\""),
        (["OTEL_TRACES_EXPORTER": "zipkin"], "OTEL_TRACES_EXPORTER", "\"zipkin\" is not supported"),
    ])
    func anUnsupportedValueIsOneLineNamingTheVariable(environment: [String: String], variable: String, message: String) throws {
        let error = try #require(throws: ConfigurationError.self) { try OTelEnvironment.check(environment) }
        #expect(error.location == .environment(variable: variable))
        #expect(error.description.hasPrefix("environment \(variable): [tracing]: "), "\(error)")
        #expect(error.description.contains(message), "\(error)")
        #expect(!error.description.contains("\n"))
    }

    @Test func supportedValuesPass() throws {
        try OTelEnvironment.check([:])
        try OTelEnvironment.check([
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.1", "OTEL_PROPAGATORS": "tracecontext", "OTEL_BSP_SCHEDULE_DELAY": "1000",
        ])
        // The traces exporter's own variable wins: a shared grpc is not what traces use.
        try OTelEnvironment.check(["OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"])
    }

    /// A configuration `run` accepts, with `[tracing]` on unless `tracing` is false.
    static func writeConfig(tracing: Bool = true) throws -> String {
        let directory = NSTemporaryDirectory() + "apnsw-otelenv-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = try SimulatorCredentials.generate(into: directory + "/credentials", teamID: "TEAM123456", keyID: "KEY1234567")
        let text = """
            [amqp]
            url = amqp://guest:guest@127.0.0.1:9/%2f
            [apns "com.example.app"]
            teamId = TEAM123456
            keyId = KEY1234567
            tokenKeyFile = credentials/AuthKey_KEY1234567.p8
            host = 127.0.0.1
            \(tracing ? "[tracing]\nendpoint = http://127.0.0.1:9" : "")
            """
        let path = directory + "/worker.conf"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// The real binary, started as an operator would with the variable set: exit 1 and one line
    /// on stderr (it crashed in swift-otel before).
    @Test(arguments: [["run", "--config"], ["check-config"]])
    func theWorkerRefusesGRPCWithOneLine(command: [String]) async throws {
        let path = try Self.writeConfig()
        var environment = ProcessInfo.processInfo.environment
        environment["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
        let result = try await runProcess(workerExecutable, command + [path], environment: environment)
        #expect(result.status == 1, "exit status \(result.status): \(result.stderr)")
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1, "one line, got: \(result.stderr)")
        #expect(
            lines.first.map(String.init)
                == "environment OTEL_EXPORTER_OTLP_PROTOCOL: [tracing]: \"grpc\" is not supported: this build exports OTLP over HTTP only (the gRPC exporter is not built in); use http/protobuf, http/json, or unset OTEL_EXPORTER_OTLP_PROTOCOL")
    }

    /// Tracing off: swift-otel never starts, and the variable is none of the worker's business.
    @Test func withoutTracingTheVariableIsLeftAlone() async throws {
        let path = try Self.writeConfig(tracing: false)
        var environment = ProcessInfo.processInfo.environment
        environment["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
        let result = try await runProcess(workerExecutable, ["check-config", path], environment: environment)
        #expect(result.status == 0, "\(result.stderr)")
    }
}
