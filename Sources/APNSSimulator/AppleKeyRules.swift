/// Apple's rules for provider token keys and connections, stated by the simulator on its own (not
/// the worker's `TokenKeyScope`: a wrong rule there must fail a test, not pass on both sides).
///
/// Source: Apple, "Establishing a token-based connection to APNs". A team-scoped key serves every
/// topic of its team in one environment, at most 2 per team and environment; a topic-specific key
/// serves the topics it lists, at most 400, in one environment, at most 200 per team and
/// environment; a key made before these serves every topic in both environments. APNs does not
/// take tokens of more than one team (developer account) on one connection.
///
/// The answers (Apple, "Handling notification responses from APNs"), where Apple's table leaves
/// the choice to us:
/// - a key limited to the other environment: 403 `BadEnvironmentKeyInToken`;
/// - a topic a topic-specific key does not list, or a topic of a bundle another team owns: 400
///   `TopicDisallowed` ("pushing to this topic is not allowed");
/// - a token of a second team on a connection whose first token was another team's: 403
///   `UnrelatedKeyIdInToken` (the key in the token is not related to the key of the connection's
///   first push; a new connection is needed), whenever it comes. A second key of the same team
///   too soon after the first stays 429 `TooManyProviderTokenUpdates`.
import APNSModel

extension AppleRules {
    static let maximumTopicsPerKey = 400
    static let maximumTopicKeysPerEnvironment = 200
    static let maximumTeamKeysPerEnvironment = 2

    /// A set of keys Apple could not have issued, described in one line.
    struct KeyProblem: Error, Sendable, CustomStringConvertible {
        var description: String
    }

    /// Refuses keys beyond Apple's limits: more than 400 topics on a key, an empty topic list,
    /// topics on a key of both environments, more than 2 team-scoped or 200 topic-specific keys of
    /// one team in one environment, one key ID given twice.
    static func checkKeys(_ keys: [SimulatorTokenKey]) throws(KeyProblem) {
        var seen = Set<String>()
        var counts: [String: (team: Int, topic: Int)] = [:]
        for key in keys {
            guard seen.insert(key.keyID).inserted else { throw KeyProblem(description: "key \(key.keyID) is given twice") }
            guard let environment = key.environment else {
                if key.topics != nil {
                    throw KeyProblem(description: "key \(key.keyID) has topics but no environment: a topic-specific key serves one")
                }
                continue
            }
            let slot = "\(key.teamID) \(environment.rawValue)"
            if let topics = key.topics {
                guard !topics.isEmpty, topics.count <= maximumTopicsPerKey else {
                    throw KeyProblem(description: "key \(key.keyID) lists \(topics.count) topics; Apple allows 1 to \(maximumTopicsPerKey)")
                }
                counts[slot, default: (0, 0)].topic += 1
                if counts[slot]!.topic > maximumTopicKeysPerEnvironment {
                    throw KeyProblem(
                        description: "team \(key.teamID) has more than \(maximumTopicKeysPerEnvironment) topic-specific keys in \(environment.rawValue)")
                }
            } else {
                counts[slot, default: (0, 0)].team += 1
                if counts[slot]!.team > maximumTeamKeysPerEnvironment {
                    throw KeyProblem(
                        description: "team \(key.teamID) has more than \(maximumTeamKeysPerEnvironment) team-scoped keys in \(environment.rawValue)")
                }
            }
        }
    }

    /// Whether `key` may sign for `topic` of `bundle` (the topic without its push type's suffix),
    /// given who owns the bundle; nil when it may.
    static func topicRefusal(key: SimulatorTokenKey, topic: String, bundle: String, owners: [String: String]) -> Rejection? {
        if let owner = owners[bundle], owner != key.teamID { return Rejection(400, .topicDisallowed) }
        if let topics = key.topics, !topics.contains(where: { $0.lowercased() == topic.lowercased() }) {
            return Rejection(400, .topicDisallowed)
        }
        return nil
    }
}
