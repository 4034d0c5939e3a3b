import APNSCore

extension JobEndKind {
    /// The registry's count for a pipeline end; nil for `held` (the job has not ended).
    init?(_ end: OutcomeRouter.End) {
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
