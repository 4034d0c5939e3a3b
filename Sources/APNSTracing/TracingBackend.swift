import APNSConfig
import Foundation
import Logging
import OTel
import ServiceLifecycle
import Tracing

/// `[tracing]` made real: swift-otel's tracer with its batch span processor and OTLP/HTTP
/// (protobuf) exporter, as a ServiceLifecycle service to run beside the worker's. Only traces:
/// logs and metrics keep their own backends (swift-log, Prometheus). The process-global
/// `InstrumentationSystem` is left alone: the tracer is handed to the pipelines and the registry
/// explicitly, so a process (or a test) may hold several.
///
/// swift-otel applies the OpenTelemetry environment variables over this configuration
/// (`OTEL_EXPORTER_OTLP_HEADERS` for a collector's token, `OTEL_EXPORTER_OTLP_CERTIFICATE`,
/// `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_RESOURCE_ATTRIBUTES`, ...), as operators of OpenTelemetry
/// expect.
public enum TracingBackend {
    /// The tracer and the service that exports its spans (and flushes them on shutdown).
    /// - Throws: `ConfigurationError` naming the variable when the process's `OTEL_*`
    ///   environment holds a value swift-otel would crash on or ignore (`OTelEnvironment`).
    public static func make(_ settings: TracingSettings, logger: Logger) throws -> (tracer: any Tracer, service: any Service) {
        // The loader checked the environment it was given; this is the one swift-otel reads.
        try OTelEnvironment.check(ProcessInfo.processInfo.environment)
        let backend = try OTel.makeTracingBackend(configuration: configuration(settings, logger: logger))
        return (backend.factory, backend.service)
    }

    /// swift-otel's configuration for `settings`.
    static func configuration(_ settings: TracingSettings, logger: Logger) -> OTel.Configuration {
        var configuration = OTel.Configuration.default
        configuration.serviceName = settings.serviceName
        configuration.diagnosticLogger = .custom(logger)
        configuration.diagnosticLogLevel = .warning
        configuration.propagators = [.traceContext]
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.traces.exporter = .otlp
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        configuration.traces.otlpExporter.endpoint = settings.tracesURL
        // Validated by the configuration loader: 0...1, so neither sampler is nil.
        let ratio = min(max(settings.sampleRatio, 0), 1)
        configuration.traces.sampler = (settings.parentBased ? .parentBasedTraceIDRatio(ratio: ratio) : .traceIDRatio(ratio: ratio)) ?? .alwaysOff
        return configuration
    }
}
