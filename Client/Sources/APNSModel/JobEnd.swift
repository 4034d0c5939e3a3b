/// How a job ends: the one word for it in the pipeline, the router (each `OutcomeRouter.Route`
/// carries its end), the statistics, the logs, the fleet's rates and the registry's counts
/// (docs/decisions.md, "One vocabulary for a job's end").
///
/// Three types in all say how a job ends, each for one question: `Outcome` (APNSOutcome) what
/// Apple's answer means; `OutcomeRouter.Route` where the job's delivery goes; `JobEnd` which end
/// that is, the one thing counted and logged. Nothing derives an end from a route or an outcome
/// anywhere else.
///
/// Each end has two spellings, both fixed because they are stored or on the wire:
/// - `label`, snake_case: the `outcome` label of `apns_worker_jobs_total`, the keys of a bundle's
///   `jobs` in `/api/status`, the stop line, the `job.end` of log lines and `apns.outcome` of spans;
/// - `contractName`, camelCase, the contract's spelling: the registry's `end_kind` column in
///   PostgreSQL and its counts in the admin API and `apns-worker stats` (§6), the count fields
///   of a fleet heartbeat (§5), `apns-worker fleet`'s columns, and the `kind` label of
///   `apns_registry_group_notifications_total` (the registry's own ends). `held` has none: the job
///   comes back, so nothing counts it as ended.
public enum JobEnd: Sendable, Hashable, CaseIterable {
    /// APNs accepted the notification.
    case delivered
    /// Apple says the device token (or broadcast channel) is invalid: feedback event published.
    case invalidToken
    /// Into a retry queue, to be sent again after a backoff delay.
    case retry
    /// Into the dead queue, for a person to look at (also retries exhausted, malformed, poison,
    /// too large).
    case dead
    /// A provider fault holds the bundle: the job goes back to the end of its work queue.
    case held
    /// The rollout gate held the job back: into the first retry queue, no attempt spent.
    case gated
    /// A group job's device notifications published at once (the registry's, never the pipeline's).
    case fannedOut
    /// A group job's device notifications merged into a device's trailing push (contract §6).
    case coalesced
    /// Trailing pushes published (docs/decisions.md, "Sync window").
    case trailing

    /// The ends a bundle's pipeline reaches, in the order of its counters.
    public static let pipelineEnds: [JobEnd] = [.delivered, .invalidToken, .retry, .dead, .held, .gated]

    /// The ends the registry counts (every one but `held`), in the order of `apns-worker stats`'
    /// columns and the admin chart's stacks. Pushes out = `fannedOut` + `trailing`; group-job
    /// notifications = `fannedOut` + `coalesced`.
    public static let registryEnds: [JobEnd] = allCases.filter { $0.contractName != nil }

    /// The ends of a group job's notifications (`apns_registry_group_notifications_total{kind}`).
    public static let groupEnds: [JobEnd] = [.fannedOut, .coalesced, .trailing]

    /// The ends each instance reports in its fleet heartbeat and the fleet's rates are kept of.
    public static let fleetEnds: [JobEnd] = [.delivered, .invalidToken, .retry, .dead]

    /// The snake_case name: metric label, `/api/status` key, log and span attribute.
    public var label: String {
        switch self {
        case .delivered: "delivered"
        case .invalidToken: "invalid_token"
        case .retry: "retry"
        case .dead: "dead"
        case .held: "held"
        case .gated: "gated"
        case .fannedOut: "fanned_out"
        case .coalesced: "coalesced"
        case .trailing: "trailing"
        }
    }

    /// The contract's camelCase name, which the registry stores; nil for `held`, which ends nothing.
    public var contractName: String? {
        switch self {
        case .delivered: "delivered"
        case .invalidToken: "invalidToken"
        case .retry: "retry"
        case .dead: "dead"
        case .held: nil
        case .gated: "gated"
        case .fannedOut: "fannedOut"
        case .coalesced: "coalesced"
        case .trailing: "trailing"
        }
    }

    /// The end of a contract name (a count row read back from PostgreSQL); nil for anything else.
    public init?(contractName: String) {
        guard let end = Self.registryEnds.first(where: { $0.contractName == contractName }) else { return nil }
        self = end
    }

    /// The end of a label; nil for anything else.
    public init?(label: String) {
        guard let end = Self.allCases.first(where: { $0.label == label }) else { return nil }
        self = end
    }
}
