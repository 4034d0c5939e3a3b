import APNSModel

/// The broker names of contract §1 and the queue type, shared by the worker, the CLI and the
/// tests. The declarations themselves (arguments and all) are built in `APNSTopology`.
public enum QueueType: String, Sendable, Hashable, CaseIterable {
    case quorum
    case classic
}

/// The names the contract fixes, and the ones it leaves to us (retry queues).
public enum TopologyNames {
    /// Where the sync server publishes jobs; routing key = bundle ID.
    public static let jobsExchange = "apns.jobs"
    /// Alternate exchange and queue for jobs of bundle IDs no worker is configured for.
    public static let unrouted = "apns.unrouted"
    /// Topic exchange for invalid-token events; routing key = bundle ID.
    public static let feedbackExchange = "apns.feedback"
    /// Alternate exchange and queue for feedback events no queue is bound for, so an event is
    /// kept until the sync server binds its own queue instead of being dropped by the broker.
    public static let feedbackUnrouted = "apns.feedback.unrouted"
    /// Topic exchange for delivery events (contract §8); routing key `<bundleID>.<end>`. No
    /// alternate exchange: an event is for a sender that asked for it and bound its queue.
    public static let eventsExchange = "apns.events"

    /// The longest bundle ID whose queue names, `apns.<bundle>.retry.<delay>` or
    /// `apns.fleet.paused.<bundle>`, fit an AMQP short string (255 bytes). The configuration
    /// takes contract §6's 155 (`UntrustedText.maxBundleIDBytes`), within it.
    public static let maxBundleIDBytes = 200

    public static func workQueue(_ bundleID: String) -> String { "apns.\(bundleID)" }
    public static func deadQueue(_ bundleID: String) -> String { "apns.\(bundleID).dead" }
    /// One retry queue per distinct delay, named by the delay so a queue's meaning is visible in
    /// the management UI: `apns.<bundle>.retry.10s`, `apns.<bundle>.retry.5m`.
    public static func retryQueue(_ bundleID: String, delay: Duration) -> String {
        "apns.\(bundleID).retry.\(delayLabel(delay))"
    }

    /// `90s` → `1m30s`, `3600s` → `1h`, `1500ms` → `1500ms`.
    public static func delayLabel(_ delay: Duration) -> String {
        let ms = delay.milliseconds
        if ms % 1000 != 0 { return "\(ms)ms" }
        var s = ms / 1000
        var out = ""
        if s >= 3600 { out += "\(s / 3600)h"; s %= 3600 }
        if s >= 60 { out += "\(s / 60)m"; s %= 60 }
        if s > 0 || out.isEmpty { out += "\(s)s" }
        return out
    }
}

/// Message headers the worker writes (contract §4), shared by the worker, the CLI and the tests.
public enum JobHeaders {
    /// Attempts made so far, on jobs in retry queues and requeued jobs.
    public static let attempt = "x-apns-attempt"
    public static let reason = "x-apns-reason"
    public static let status = "x-apns-status"
    public static let attempts = "x-apns-attempts"
    public static let failedAt = "x-apns-failed-at"
    public static let error = "x-apns-error"
    /// On a job requeued by an operator: the `x-apns-reason` it had when it was dead.
    public static let lastReason = "x-apns-last-reason"
    /// Written by RabbitMQ on a quorum queue's redeliveries: how many times it was delivered
    /// before. Never forwarded, so that a count always belongs to the delivery it came with.
    public static let deliveryCount = "x-delivery-count"
    /// W3C Trace Context (https://www.w3.org/TR/trace-context/), set by a producer that traces:
    /// the trace and span the job continues, and vendors' state. Carried unchanged on retries.
    public static let traceParent = "traceparent"
    public static let traceState = "tracestate"
}
