/// What Apple lets one provider token key sign for, as configuration states it (`keyEnvironment`,
/// `keyTopics` of an `[apns "…"]` section), and what Apple answers a request outside it.
///
/// Apple, "Establishing a token-based connection to APNs": a key made before Apple's scoped keys
/// (or created for both environments) signs tokens for every topic of its team in sandbox and
/// production. A *team-scoped* key serves every topic of its team in one environment, at most two
/// such keys per environment. A *topic-specific* key serves the topics it lists (at most 400) in
/// one environment, at most 200 such keys per environment.
public struct TokenKeyScope: Sendable, Hashable {
    /// The one environment the key serves; nil when it serves both.
    public var environment: APNSEnvironment?
    /// The topics of a topic-specific key, in the order configured; nil for a key that serves
    /// every topic of its team.
    public var topics: [String]?

    /// Apple's limit of topics on one topic-specific key.
    public static let maximumTopicsPerKey = 400
    /// Apple's limit of topic-specific keys per team and environment.
    public static let maximumTopicKeysPerEnvironment = 200
    /// Apple's limit of team-scoped keys per team and environment.
    public static let maximumTeamKeysPerEnvironment = 2

    /// A key without restrictions: both environments, every topic of the team.
    public static let unrestricted = TokenKeyScope()

    public init(environment: APNSEnvironment? = nil, topics: [String]? = nil) {
        self.environment = environment
        self.topics = topics
    }

    /// True for a key limited to listed topics.
    public var isTopicSpecific: Bool { topics != nil }

    public func serves(_ environment: APNSEnvironment) -> Bool {
        self.environment.map { $0 == environment } ?? true
    }

    /// Topics compare as Apple's bundle IDs do: without regard to case.
    public func covers(topic: String) -> Bool {
        guard let topics else { return true }
        let wanted = topic.lowercased()
        return topics.contains { $0.lowercased() == wanted }
    }

    /// What Apple answers a request this key cannot sign for, nil when it can: a token for the
    /// other environment is 403 `BadEnvironmentKeyInToken` (checked first: Apple authenticates
    /// the token before it reads the topic), a topic the key does not list 400 `TopicDisallowed`.
    public func refusal(environment: APNSEnvironment, topic: String) -> HTTPAnswer? {
        if !serves(environment) { return HTTPAnswer(status: 403, reason: .badEnvironmentKeyInToken) }
        if !covers(topic: topic) { return HTTPAnswer(status: 400, reason: .topicDisallowed) }
        return nil
    }

    /// `sandbox`, `production` or `both`, as `keyEnvironment` spells it.
    public var environmentName: String { environment?.rawValue ?? "both" }
}
