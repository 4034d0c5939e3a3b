/// The OpenTelemetry environment variables swift-otel reads when tracing starts, checked before
/// it reads them. swift-otel ends the process with `fatalError` on some values this build cannot
/// serve (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`: the gRPC exporter is not built in; the Jaeger and
/// X-Ray samplers; the B3, Jaeger, X-Ray, OT and baggage propagators), and quietly falls back to
/// its defaults on a value it does not know. Either way the operator is not told what happened:
/// here every such value is one configuration error naming the variable, as for a bad key.
public enum OTelEnvironment {
    /// The variables checked, in the order they are checked, with the values this build serves.
    /// swift-otel compares values exactly (case and spaces count), and so does this check.
    static let rules: [(variables: [String], supported: [String], list: Bool, why: String)] = [
        // The traces exporter's protocol: the signal's own variable wins over the shared one.
        (["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"], ["http/protobuf", "http/json"], false,
         "this build exports OTLP over HTTP only (the gRPC exporter is not built in)"),
        (["OTEL_TRACES_EXPORTER"], ["otlp", "console", "none"], false, "not a traces exporter this build has"),
        (["OTEL_TRACES_SAMPLER"],
         ["always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"], false,
         "not a sampler this build has (or use [tracing] sampleRatio and parentBased)"),
        (["OTEL_PROPAGATORS"], ["tracecontext", "none"], true, "this build propagates W3C trace context only"),
    ]

    /// Throws for the first `OTEL_*` variable of `environment` whose value swift-otel would
    /// crash on or ignore.
    public static func check(_ environment: [String: String]) throws(ConfigurationError) {
        for rule in rules {
            // Only the variable swift-otel uses: the first of the list that is set.
            guard let variable = rule.variables.first(where: { environment[$0] != nil }), let value = environment[variable] else { continue }
            let items = rule.list ? value.split(separator: ",", omittingEmptySubsequences: false).map(String.init) : [value]
            for item in items where !rule.supported.contains(item) {
                throw ConfigurationError(
                    .badValue, at: .environment(variable: variable), section: "[tracing]",
                    "\(ValueSyntax.quoted(item)) is not supported: \(rule.why); use \(rule.supported.joined(separator: ", ")), or unset \(variable)")
            }
        }
    }
}
