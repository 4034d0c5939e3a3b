/// The seam between the delivery pipeline and whatever keeps a record of job ends (the device
/// registry of contract §6: counts and invalid-token marks). Implementations must neither block
/// nor suspend: they append to a bounded buffer that something else writes out.
public protocol JobEndObserver: Sendable {
    /// A job of `bundleID` reached its final end (called once per end, never for `held`).
    func jobEnded(bundleID: String, end: JobEndKind)
    /// Apple says `token` of `bundleID` is invalid: an invalid-token end (HTTP/2 410/400, binary
    /// status 8; `timestamp` is Apple's, ms since the epoch, or nil) or a feedback-service tuple.
    func tokenInvalid(bundleID: String, token: DeviceToken, reason: String, timestamp: Int64?)
}

/// The end a job reached in a worker's pipeline: the one list of ends that the pipeline's
/// tally, the Prometheus series (its raw values are their `outcome` labels), the admin page and,
/// through `JobEndKind`, the registry's counts all derive from.
public enum JobEnd: String, Sendable, Hashable, CaseIterable {
    case delivered, invalidToken = "invalid_token", retry, dead, held, gated
}

/// The ends the registry counts (contract §6), spelled as in the contract: the final ends of
/// `JobEnd` (`held` is not one: the job comes back), the group-job notifications fanned out at
/// once (`fannedOut`), those merged into a device's trailing push (`coalesced`), and, where the
/// contract is silent, the trailing pushes published (`trailing`, see docs/decisions.md), so that
/// pushes out = `fannedOut` + `trailing` and group-job notifications = `fannedOut` + `coalesced`.
public enum JobEndKind: String, Sendable, Hashable, CaseIterable, Codable {
    case delivered, invalidToken, retry, dead, gated, fannedOut, coalesced, trailing

    /// The registry's count for a pipeline end; nil for `held` (the job has not ended).
    public init?(_ end: JobEnd) {
        switch end {
        case .delivered: self = .delivered
        case .invalidToken: self = .invalidToken
        case .retry: self = .retry
        case .dead: self = .dead
        case .gated: self = .gated
        case .held: return nil
        }
    }
}
