import APNSModel
import APNSTopologyNames

/// The short, secret-free description of a configuration that `apns-worker check-config` prints.
extension WorkerConfiguration {
    public var summaryLines: [String] {
        var lines: [String] = []
        let urlCount = amqp.urls.count == 1 ? "1 url" : "\(amqp.urls.count) urls (failover)"
        let share = amqp.inFlightBudget.share(bundles: bundles.count)
        var amqpLine = "amqp: \(urlCount): \(amqp.maskedURLs.joined(separator: ", ")); prefetch \(amqp.prefetch), "
        amqpLine += "maxInFlight \(amqp.maxInFlight): \(share.perBundle) per bundle × \(bundles.count), \(amqp.queueType.rawValue) queues"
        lines.append(amqpLine)
        if let warning = amqp.inFlightBudget.floorWarning(bundles: bundles.count) { lines.append("  warning: \(warning)") }
        lines.append("retry: delays \(retry.delays.map(TopologyNames.delayLabel).joined(separator: ", ")), maxAttempts \(retry.maxAttempts)")
        lines.append("admin: listen \(admin.listen)\(admin.token == nil ? "" : ", bearer token set")\(admin.metricsToken == nil ? "" : ", metrics token set"), fleet heartbeat every \(TopologyNames.delayLabel(admin.heartbeatInterval))")
        if let tracing {
            let sampling = "sampleRatio \(tracing.sampleRatio)\(tracing.parentBased ? ", parent-based" : "")"
            lines.append("tracing: OTLP/HTTP to \(tracing.tracesURL) as \(tracing.serviceName), \(sampling)")
        }
        lines.append("bundles: \(bundles.count)")
        for bundle in bundles {
            let endpoint = bundle.endpoint(for: bundle.environment)
            var line = "  \(bundle.bundleID): \(bundle.transport.rawValue), \(bundle.auth.kindName) auth, "
            line += "\(bundle.environment.rawValue), \(endpoint.host):\(endpoint.port), \(bundle.connections) connection"
            line += bundle.connections == 1 ? "" : "s"
            if let keyEnvironment = bundle.keyScope.environment {
                let topics = bundle.keyScope.topics.map { " (\($0.count) topic\($0.count == 1 ? "" : "s"))" }
                line += topics.map { ", topic-specific \(keyEnvironment.rawValue) key\($0)" } ?? ", \(keyEnvironment.rawValue)-only key"
            }
            if !bundle.rollout.isOpen { line += ", rollout gate on" }
            lines.append(line)
        }
        return lines
    }
}
