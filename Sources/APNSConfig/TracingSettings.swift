import Foundation

/// `[tracing]`: OpenTelemetry traces exported over OTLP/HTTP (protobuf). Absent section and no
/// `APNS_WORKER_TRACING_ENDPOINT`: tracing is off and the pipeline pays one branch per job.
public struct TracingSettings: Sendable, Hashable {
    /// `endpoint`: the collector's OTLP/HTTP address, `http://collector:4318` (a URL without a
    /// path gets OTLP's `/v1/traces`) or the full traces URL. Required.
    public var endpoint: String
    /// `serviceName`: the `service.name` resource attribute of every span. Default `apns-worker`.
    public var serviceName: String = TracingSettings.defaultServiceName
    /// `sampleRatio`: the share of traces recorded, 0 to 1, decided on the trace id (so every
    /// instance keeps or drops the same trace). Default 1.
    public var sampleRatio: Double = 1
    /// `parentBased`: true for producers the operator trusts: a job's span continues the
    /// producer's `traceparent` as its parent and follows its sampling decision, `sampleRatio`
    /// deciding only for jobs without one (OpenTelemetry's `parentbased_traceidratio`). False
    /// (the default): anyone who may publish could force sampling with a sampled
    /// `traceparent` (or a chosen trace id), so a job's span starts a trace of the worker's own,
    /// linked to the producer's span, and `sampleRatio` decides for every job (`traceidratio`).
    public var parentBased: Bool = false
    /// Where `endpoint` was set (file and line, or environment variable), for start-up errors.
    public var endpointLocation: ConfigLocation = .environment(variable: "APNS_WORKER_TRACING_ENDPOINT")

    public static let defaultServiceName = "apns-worker"

    public init(endpoint: String) {
        self.endpoint = endpoint
    }

    /// The URL spans are posted to: `endpoint`, with `/v1/traces` when it has no path.
    public var tracesURL: String {
        guard let components = URLComponents(string: endpoint), components.path.isEmpty || components.path == "/" else {
            return endpoint
        }
        return endpoint.hasSuffix("/") ? endpoint + "v1/traces" : endpoint + "/v1/traces"
    }

    /// Checks an `endpoint` value: an `http` or `https` URL with a host, without credentials,
    /// query or fragment (a collector's token goes in `OTEL_EXPORTER_OTLP_HEADERS`, not the file).
    static func checkEndpoint(_ text: String) throws(ValueProblem) {
        let quoted = ValueSyntax.quoted(AMQPSettings.maskingPassword(text))
        guard !text.contains(where: { $0.isWhitespace || $0.isNewline }), let components = URLComponents(string: text),
            let scheme = components.scheme?.lowercased()
        else {
            throw ValueProblem("\(quoted) is not a URL (e.g. http://otel-collector:4318)")
        }
        guard scheme == "http" || scheme == "https" else {
            throw ValueProblem("\(quoted): OTLP/HTTP needs an http:// or https:// URL (gRPC is not built in)")
        }
        guard let host = components.host, !host.isEmpty else { throw ValueProblem("\(quoted) has no host") }
        guard components.user == nil, components.password == nil else {
            throw ValueProblem("\(quoted) holds credentials: set OTEL_EXPORTER_OTLP_HEADERS instead")
        }
        guard components.query == nil, components.fragment == nil else {
            throw ValueProblem("\(quoted): a query or fragment is not part of an OTLP endpoint")
        }
        if let port = components.port, !(1...65535).contains(port) { throw ValueProblem("\(quoted) has a port out of range") }
    }
}

extension ConfigurationLoader {
    /// The `[tracing]` keys.
    static let tracingKeys = ["endpoint", "serviceName", "sampleRatio", "parentBased"]

    /// `[tracing]`, or nil when neither the file nor the environment asks for traces.
    static func readTracing(_ settings: LayeredSettings, document: ConfigDocument) throws(ConfigurationError) -> TracingSettings? {
        guard let endpointSetting = settings.string("tracing", "endpoint") else {
            let header = document.sections.first { $0.name.lowercased() == "tracing" && $0.subsection == nil }
            let other = tracingKeys.dropFirst().first { settings.string("tracing", $0) != nil }
            guard header != nil || other != nil else { return nil }
            throw ConfigurationError(
                .missingKey, at: header.map { .file(path: document.path, line: $0.line) } ?? .environment(variable: environmentVariable(section: "tracing", key: other!)),
                section: "[tracing]", key: "endpoint",
                "missing: endpoint = http://otel-collector:4318 is required (or set APNS_WORKER_TRACING_ENDPOINT); without [tracing] nothing is traced")
        }
        try settings.check(endpointSetting.location, "tracing", "endpoint") { () throws(ValueProblem) in
            try TracingSettings.checkEndpoint(endpointSetting.value)
        }
        var tracing = TracingSettings(endpoint: endpointSetting.value)
        tracing.endpointLocation = endpointSetting.location
        if let setting = settings.string("tracing", "serviceName") {
            tracing.serviceName = try settings.parse(setting, "tracing", "serviceName") { v throws(ValueProblem) in
                guard !v.isEmpty, v.utf8.count <= 255, !v.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) is not a service name (1 to 255 bytes, no control characters)")
                }
                return v
            }
        }
        if let setting = settings.string("tracing", "sampleRatio") {
            tracing.sampleRatio = try settings.parse(setting, "tracing", "sampleRatio") { v throws(ValueProblem) in
                guard let ratio = Double(v), ratio.isFinite, (0...1).contains(ratio) else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) is not a ratio from 0 to 1 (e.g. 0.05 for one trace in twenty)")
                }
                return ratio
            }
        }
        if let setting = settings.string("tracing", "parentBased") {
            tracing.parentBased = try settings.parse(setting, "tracing", "parentBased") { v throws(ValueProblem) in try ValueSyntax.bool(v) }
        }
        return tracing
    }
}
