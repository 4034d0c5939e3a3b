/// The seam between the delivery pipeline and whatever keeps a record of job ends (the device
/// registry of contract §6: counts and invalid-token marks). Implementations must neither block
/// nor suspend: they append to a bounded buffer that something else writes out.
public protocol JobEndObserver: Sendable {
    /// A job of `bundleID` reached its final end (called once per end, never for `held`, which has
    /// no `contractName`).
    func jobEnded(bundleID: String, end: JobEnd)
    /// Apple says `token` of `bundleID` is invalid: an invalid-token end (HTTP/2 410/400, binary
    /// status 8; `timestamp` is Apple's, ms since the epoch, or nil) or a feedback-service tuple.
    func tokenInvalid(bundleID: String, token: DeviceToken, reason: String, timestamp: Int64?)
}
