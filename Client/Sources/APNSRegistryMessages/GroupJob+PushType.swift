import APNSModel

/// A group job's push type as section 2 resolves it (explicit `pushType`, else `background` for
/// a payload with `content-available: 1` and no `alert`, `sound` or `badge`): the sync window of
/// contract §6 coalesces background group jobs only.
extension GroupJob {
    /// Parsed from the device job this group job builds, by the same parser that will send it,
    /// so the rule lives in one place (`JobParser`). Kept out of `GroupJobParser.parse` on purpose:
    /// that function is the group job's validation, changed by other work; this is one extra parse
    /// of a few hundred bytes per group job. Nil only for a job `GroupJobParser` would refuse.
    public var pushType: PushType? {
        let probe = jobBody(bundleID: "group.pushtype", token: "00", environment: .production).body
        let parsed = JobParser.parse(
            body: probe, bundleID: "group.pushtype", messageID: nil, defaultEnvironment: .production, transport: .http2)
        guard case .success(let job) = parsed else { return nil }
        return job.pushType
    }

    public var isBackground: Bool { pushType == .background }
}
