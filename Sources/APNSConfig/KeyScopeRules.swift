import APNSModel

/// Apple's key rules across `[apns "…"]` sections (each section's own are in `KeyScopeReader`):
/// sections that name the same key (team ID + key ID) describe one key, so they must give it the
/// same scope; and a team has at most 2 team-scoped keys and 200 topic-specific keys per
/// environment (Apple, "Establishing a token-based connection to APNs"). A configuration beyond
/// that names a key Apple cannot have issued: a typo in `keyId` or a stale section.
enum KeyScopeRules {
    static func check(_ bundles: [BundleConfiguration], document: ConfigDocument) throws(ConfigurationError) {
        struct KeyName: Hashable {
            var teamID: String
            var keyID: String
        }
        struct FirstUse {
            var bundle: BundleConfiguration
            var section: ConfigSection?
        }
        var firstUse: [KeyName: FirstUse] = [:]
        /// Per team and environment, the scoped keys in file order: team-scoped, topic-specific.
        var teamKeys: [String: [APNSEnvironment: (team: [String], topic: [String])]] = [:]

        for bundle in bundles {
            guard case .token(let teamID, let keyID, _) = bundle.auth else { continue }
            let section = document.sections.first { $0.name.lowercased() == "apns" && $0.subsection == bundle.bundleID }
            func line(_ keys: String...) -> Int? {
                keys.lazy.compactMap { section?.entries(forKey: $0).last?.line }.first ?? section?.line
            }
            func fail(_ keys: [String], _ message: String) -> ConfigurationError {
                let key = keys.first { section?.entries(forKey: $0).last != nil } ?? "keyId"
                return ConfigurationError(
                    .conflict, at: .file(path: document.path, line: line(key)), section: section?.displayName, key: key, message)
            }

            let name = KeyName(teamID: teamID, keyID: keyID)
            if let earlier = firstUse[name] {
                guard Self.sameScope(earlier.bundle.keyScope, bundle.keyScope) else {
                    let earlierName = earlier.section?.displayName ?? "[apns \"\(earlier.bundle.bundleID)\"]"
                    let earlierLine = earlier.section.map { " (line \($0.line))" } ?? ""
                    throw fail(
                        BundleReader.keyScopeKeys,
                        "key \(keyID) of team \(teamID) is described differently in \(earlierName)\(earlierLine): one key has one scope, give every section that uses it the same keyEnvironment and keyTopics")
                }
                continue
            }
            firstUse[name] = FirstUse(bundle: bundle, section: section)

            guard let environment = bundle.keyScope.environment else { continue }
            var keys = teamKeys[teamID, default: [:]][environment, default: (team: [], topic: [])]
            if bundle.keyScope.isTopicSpecific {
                keys.topic.append(keyID)
                if keys.topic.count > TokenKeyScope.maximumTopicKeysPerEnvironment {
                    throw fail(
                        ["keyTopics"],
                        "key \(keyID) is topic-specific key number \(keys.topic.count) of team \(teamID) in \(environment.rawValue); Apple issues at most \(TokenKeyScope.maximumTopicKeysPerEnvironment) per environment")
                }
            } else {
                keys.team.append(keyID)
                if keys.team.count > TokenKeyScope.maximumTeamKeysPerEnvironment {
                    throw fail(
                        ["keyEnvironment"],
                        "key \(keyID) is a third \(environment.rawValue) team-scoped key of team \(teamID) (after \(keys.team.dropLast().joined(separator: ", "))); Apple issues at most \(TokenKeyScope.maximumTeamKeysPerEnvironment) per environment")
                }
            }
            teamKeys[teamID, default: [:]][environment] = keys
        }
    }

    /// The same environment and the same topics, in any order and case.
    static func sameScope(_ a: TokenKeyScope, _ b: TokenKeyScope) -> Bool {
        a.environment == b.environment && a.topics.map { Set($0.map { $0.lowercased() }) } == b.topics.map { Set($0.map { $0.lowercased() }) }
    }
}
