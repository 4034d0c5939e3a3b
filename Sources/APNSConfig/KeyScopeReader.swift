import APNSModel

/// `keyEnvironment` and `keyTopics` of one `[apns "…"]` section: what Apple lets its token key
/// sign for (`TokenKeyScope`), checked against the section itself. A section the key cannot serve
/// is refused at start-up rather than held on its first job: Apple would refuse every one of its
/// notifications (`BadEnvironmentKeyInToken`, `TopicDisallowed`).
///
/// - `keyEnvironment = sandbox | production | both` (default `both`, as keys made before Apple's
///   scoped keys are): a team-scoped key limited to one environment must be the bundle's.
/// - `keyTopics = topic, topic, …` (1 to 400, no repeats): a topic-specific key. Such a key serves
///   one environment, so `keyEnvironment` must name it; the list must hold the bundle ID itself
///   (the topic of `alert` and `background` jobs). Topics with a push type's suffix
///   (`.voip`, …) are checked per job, and other bundles' topics may be listed: one key may
///   serve several bundles.
extension BundleReader {
    static let keyScopeKeys = ["keyEnvironment", "keyTopics"]

    func readKeyScope(
        auth: APNSAuthentication, environment: APNSEnvironment, bundleID: String
    ) throws(ConfigurationError) -> TokenKeyScope {
        let given = Self.keyScopeKeys.compactMap { key in entry(key).map { (key: key, entry: $0) } }
        guard let first = given.min(by: { $0.entry.line < $1.entry.line }) else { return .unrestricted }
        guard case .token = auth else {
            throw error(.conflict, line: first.entry.line, key: first.key,
                "only applies to token auth (teamId, keyId, tokenKeyFile); a certificate names its environment and topics itself")
        }

        let keyEnvironment: APNSEnvironment? = try value("keyEnvironment") { v throws(ValueProblem) -> APNSEnvironment? in
            switch v.lowercased() {
            case "both": return nil
            case "sandbox": return .sandbox
            case "production": return .production
            default: throw ValueProblem("\(ValueSyntax.quoted(v)) is not a key environment (sandbox, production or both)")
            }
        } ?? nil
        let topics = try value("keyTopics", Self.parseTopics)
        let scope = TokenKeyScope(environment: keyEnvironment, topics: topics)

        if topics != nil, let topicsEntry = entry("keyTopics") {
            guard keyEnvironment != nil else {
                throw error(.conflict, line: topicsEntry.line, key: "keyTopics",
                    "a topic-specific key serves one environment: set keyEnvironment = sandbox or production, as the key was created")
            }
            guard scope.covers(topic: bundleID) else {
                throw error(.conflict, line: topicsEntry.line, key: "keyTopics",
                    "does not list this bundle's topic \(bundleID): Apple would refuse its notifications (TopicDisallowed)")
            }
        }
        if let keyEnvironment, keyEnvironment != environment, let environmentEntry = entry("keyEnvironment") {
            let chosen = (entry("environment") ?? entry("domain")).map { "line \($0.line)" } ?? "the default"
            throw error(.conflict, line: environmentEntry.line, key: "keyEnvironment",
                "a \(keyEnvironment.rawValue)-only key cannot serve this bundle's environment, \(environment.rawValue) (\(chosen)): Apple would refuse its notifications (BadEnvironmentKeyInToken)")
        }
        return scope
    }

    /// A comma-separated list of 1 to 400 distinct topics, each shaped like a bundle ID.
    static func parseTopics(_ text: String) throws(ValueProblem) -> [String] {
        let topics = try ValueSyntax.list(text)
        guard !topics.isEmpty else {
            throw ValueProblem("is empty: list the key's topics, or leave keyTopics out for a key that serves every topic of its team")
        }
        guard topics.count <= TokenKeyScope.maximumTopicsPerKey else {
            throw ValueProblem(
                "lists \(topics.count) topics; a topic-specific key has at most \(TokenKeyScope.maximumTopicsPerKey) (Apple's limit)")
        }
        var seen = Set<String>()
        for topic in topics {
            guard isTopic(topic) else {
                throw ValueProblem("\(ValueSyntax.quoted(topic)) is not a topic (a bundle ID, or one with Apple's suffix such as .voip)")
            }
            guard seen.insert(topic.lowercased()).inserted else {
                throw ValueProblem("lists \(ValueSyntax.quoted(topic)) twice")
            }
        }
        return topics
    }

    /// Letters, digits, "." and "-", not starting or ending with ".": a bundle ID, and Apple's
    /// suffixes are made of the same.
    static func isTopic(_ text: String) -> Bool {
        !text.isEmpty && !text.hasPrefix(".") && !text.hasSuffix(".")
            && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-") }
    }
}
