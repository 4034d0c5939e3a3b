
/// The rollout gate of the seed's OSS stage: per bundle, let a job through or gate it by the
/// sync server that sent it (`userInfo.syncServer`). Gated jobs are not lost: the worker puts
/// them in a retry queue, so they come back after the delay and meet the gate again. "Gated" is
/// the rollout's word all the way (the decision, the end `JobEnd.gated`); "held" is the hold
/// breaker's.
public struct RolloutRule: Sendable, Hashable {
    /// When set, only these servers pass (before the percentage is applied).
    public var allow: Set<String>?
    /// These servers never pass.
    public var deny: Set<String>
    /// Share of servers that pass, 0…100, chosen by a stable hash of the server name so a given
    /// server is either in or out on every worker instance and every restart.
    public var percentage: Int
    /// Whether a job that names no sync server passes.
    public var allowUnnamed: Bool

    public init(allow: Set<String>? = nil, deny: Set<String> = [], percentage: Int = 100, allowUnnamed: Bool = true) {
        // Host names compare case-insensitively.
        self.allow = allow.map { Set($0.map { $0.lowercased() }) }
        self.deny = Set(deny.map { $0.lowercased() })
        self.percentage = min(max(percentage, 0), 100)
        self.allowUnnamed = allowUnnamed
    }

    /// Lets everything through: the rule of a bundle without rollout settings.
    public static let open = RolloutRule()

    public enum Decision: Sendable, Hashable {
        case pass
        case gated(why: String)
    }

    public func decide(syncServer: String?) -> Decision {
        guard let server = syncServer?.lowercased(), !server.isEmpty else {
            return allowUnnamed ? .pass : .gated(why: "job names no sync server")
        }
        if deny.contains(server) { return .gated(why: "sync server \(server) is denied") }
        if let allow, !allow.contains(server) { return .gated(why: "sync server \(server) is not in the allow list") }
        if percentage >= 100 { return .pass }
        if Self.bucket(of: server) < percentage { return .pass }
        return .gated(why: "sync server \(server) is outside the \(percentage)% rollout")
    }

    /// 0…99 from FNV-1a over the UTF-8 name: stable across processes, unlike `Hasher`.
    static func bucket(of server: String) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in server.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return Int(hash % 100)
    }
}
