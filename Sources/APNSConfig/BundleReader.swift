import APNSModel

/// Reads one `[apns "bundle.id"]` section into a `BundleConfiguration`. Every error carries the
/// line of the key at fault, or of the section header for what is missing.
struct BundleReader {
    let section: ConfigSection
    let path: String
    let resolver: PathResolver

    private var sectionName: String { section.displayName }

    func entry(_ key: String) -> ConfigEntry? { section.entries(forKey: key).last }

    func error(_ kind: ConfigurationError.Kind, line: Int?, key: String?, _ message: String) -> ConfigurationError {
        ConfigurationError(kind, at: .file(path: path, line: line ?? section.line), section: sectionName, key: key, message)
    }

    /// The value of `key` parsed by `parser`, nil when the key is absent.
    func value<T>(_ key: String, _ parser: (String) throws(ValueProblem) -> T) throws(ConfigurationError) -> T? {
        guard let entry = entry(key), let text = entry.value else { return nil }
        do {
            return try parser(text)
        } catch {
            throw self.error(.badValue, line: entry.line, key: key, error.message)
        }
    }

    private func nonEmpty(_ key: String) throws(ConfigurationError) -> String? {
        try value(key) { v throws(ValueProblem) in
            guard !v.isEmpty else { throw ValueProblem("is empty") }
            return v
        }
    }

    func read() throws(ConfigurationError) -> BundleConfiguration {
        let bundleID = section.subsection ?? ""
        // Contract §6's bundle ID (`UntrustedText.isBundleID`: characters and at most 155 bytes,
        // which also keeps every queue name derived from it within AMQP's 255-byte short string,
        // `TopologyNames.maxBundleIDBytes`), and a reverse-DNS name: no dot at either end.
        let reverseDNS = !bundleID.hasPrefix(".") && !bundleID.hasSuffix(".")
        guard UntrustedText.isBundleID(bundleID), reverseDNS else {
            // Which half failed picks the message; the characters win when both did, since a
            // shorter name of the same characters would still be refused.
            guard !bundleID.isEmpty, UntrustedText.hasBundleIDCharactersOnly(bundleID), reverseDNS else {
                throw error(.badValue, line: section.line, key: nil,
                    "\(ValueSyntax.quoted(bundleID)) is not a bundle ID (letters, digits, \".\" and \"-\", e.g. com.example.app)")
            }
            throw error(.badValue, line: section.line, key: nil,
                "the bundle ID is \(bundleID.utf8.count) bytes; at most \(UntrustedText.maxBundleIDBytes), so that its queue names fit AMQP's 255")
        }

        let transport = try value("transport") { v throws(ValueProblem) in
            guard let kind = APNSTransportKind(rawValue: v.lowercased()) else {
                throw ValueProblem("\(ValueSyntax.quoted(v)) is not a transport (http2 or binary)")
            }
            return kind
        } ?? .http2

        let environment = try readEnvironment()
        let auth = try readAuth(transport: transport)
        let keyScope = try readKeyScope(auth: auth, environment: environment, bundleID: bundleID)

        func hostName(portKey: String) -> (String) throws(ValueProblem) -> String {
            { v throws(ValueProblem) in
                guard !v.isEmpty, !v.contains(where: \.isWhitespace), !v.contains("/"), !v.contains("://") else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) is not a host name or address (no scheme, no port: use \(portKey))")
                }
                return v
            }
        }
        let host = try value("host", hostName(portKey: "port"))
        let port = try value("port") { v throws(ValueProblem) in try ValueSyntax.int(v, in: 1...65535) }
        // Broadcast push (contract §7) exists on the HTTP/2 provider API only.
        for key in ["channelHost", "channelPort"] {
            if let http2Only = entry(key), transport != .http2 {
                throw error(.conflict, line: http2Only.line, key: key,
                    "only applies to transport = http2 (broadcast channels do not exist on the binary provider API)")
            }
        }
        let channelHost = try value("channelHost", hostName(portKey: "channelPort"))
        let channelPort = try value("channelPort") { v throws(ValueProblem) in try ValueSyntax.int(v, in: 1...65535) }
        let caFile = try nonEmpty("caFile").map(resolver.resolve)
        let connections = try value("connections") { v throws(ValueProblem) in try ValueSyntax.int(v, in: 1...16) }

        let syncServerList: (String) throws(ValueProblem) -> [String] = { v throws(ValueProblem) in
            try ValueSyntax.list(v).map { $0.lowercased() }
        }
        let rollout = RolloutGate(
            allowSyncServers: try value("allowSyncServers", syncServerList) ?? [],
            denySyncServers: try value("denySyncServers", syncServerList) ?? [],
            percentage: try value("rolloutPercentage") { v throws(ValueProblem) in
                try ValueSyntax.int(v.hasSuffix("%") ? String(v.dropLast()) : v, in: 0...100)
            } ?? 100)

        var binaryHoldWindow = BundleConfiguration.defaultBinaryHoldWindow
        if let holdEntry = entry("binaryHoldWindow") {
            guard transport == .binary else {
                throw error(.conflict, line: holdEntry.line, key: "binaryHoldWindow",
                    "only applies to transport = binary (this bundle uses http2)")
            }
            binaryHoldWindow = try value("binaryHoldWindow") { v throws(ValueProblem) in
                let window = try ValueSyntax.duration(v)
                guard window >= .milliseconds(10), window <= .seconds(60) else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) is out of range (10ms to 1m)")
                }
                return window
            } ?? binaryHoldWindow
        }

        for key in ["feedbackInterval", "feedbackPort"] {
            if let binaryOnly = entry(key), transport != .binary {
                throw error(.conflict, line: binaryOnly.line, key: key,
                    "only applies to transport = binary (this bundle uses http2; HTTP/2 reports dead tokens per notification)")
            }
        }
        let feedbackInterval = try value("feedbackInterval") { v throws(ValueProblem) in
            let interval = try ValueSyntax.duration(v)
            guard interval == .zero || (interval >= .seconds(1) && interval <= .seconds(24 * 3600)) else {
                throw ValueProblem("\(ValueSyntax.quoted(v)) is out of range (0 to turn polling off, or 1s to 24h)")
            }
            return interval
        } ?? BundleConfiguration.defaultFeedbackInterval
        let feedbackPort = try value("feedbackPort") { v throws(ValueProblem) in try ValueSyntax.int(v, in: 1...65535) }
            ?? BundleConfiguration.defaultFeedbackPort

        var bundle = BundleConfiguration(
            bundleID: bundleID, transport: transport, environment: environment, auth: auth, host: host, port: port,
            caFile: caFile, connections: connections, rollout: rollout, binaryHoldWindow: binaryHoldWindow,
            feedbackInterval: feedbackInterval, feedbackPort: feedbackPort, channelHost: channelHost, channelPort: channelPort,
            line: section.line)
        bundle.keyScope = keyScope
        bundle.events = try value("events") { v throws(ValueProblem) in
            guard let level = DeliveryEventLevel(rawValue: v.lowercased()) else {
                throw ValueProblem("\(ValueSyntax.quoted(v)) is not an events level (none, ends or all)")
            }
            return level
        } ?? .none
        return bundle
    }

    /// `environment`, or the seed's `domain`; both may be given when they agree.
    private func readEnvironment() throws(ConfigurationError) -> APNSEnvironment {
        let fromEnvironment = try value("environment") { v throws(ValueProblem) in
            guard let environment = APNSEnvironment(rawValue: v.lowercased()) else {
                throw ValueProblem("\(ValueSyntax.quoted(v)) is not an environment (production or sandbox)")
            }
            return environment
        }
        let fromDomain = try value("domain") { v throws(ValueProblem) in
            switch v.lowercased() {
            case "push.apple.com": return APNSEnvironment.production
            case "sandbox.push.apple.com": return APNSEnvironment.sandbox
            default:
                throw ValueProblem(
                    "\(ValueSyntax.quoted(v)) is not an APNs domain (push.apple.com or sandbox.push.apple.com; use host and port to connect elsewhere)")
            }
        }
        if let fromEnvironment, let fromDomain, fromEnvironment != fromDomain, let domainEntry = entry("domain"),
            let environmentEntry = entry("environment")
        {
            throw error(.conflict, line: domainEntry.line, key: "domain",
                "\(ValueSyntax.quoted(domainEntry.value ?? "")) contradicts environment = \(fromEnvironment.rawValue) (line \(environmentEntry.line)); keep one")
        }
        return fromEnvironment ?? fromDomain ?? .production
    }

    private func readAuth(transport: APNSTransportKind) throws(ConfigurationError) -> APNSAuthentication {
        let tokenKeys = ["teamId", "keyId", "tokenKeyFile"]
        let certificateKeys = ["certFile", "keyFile"]
        let tokenEntries = tokenKeys.compactMap { key in entry(key).map { (key, $0) } }
        let certificateEntries = certificateKeys.compactMap { key in entry(key).map { (key, $0) } }

        if let firstToken = tokenEntries.first, let firstCertificate = certificateEntries.first {
            let later = firstToken.1.line > firstCertificate.1.line ? firstToken : firstCertificate
            throw error(.conflict, line: later.1.line, key: later.0,
                "both token auth (teamId, keyId, tokenKeyFile) and certificate auth (certFile, keyFile) are given; keep one")
        }
        if !tokenEntries.isEmpty {
            if transport == .binary {
                throw error(.conflict, line: tokenEntries[0].1.line, key: tokenEntries[0].0,
                    "the binary transport needs certificate auth (certFile, keyFile); token auth is HTTP/2 only")
            }
            if let missing = tokenKeys.first(where: { key in !tokenEntries.contains { $0.0 == key } }) {
                throw error(.missingKey, line: section.line, key: missing,
                    "token auth incomplete: teamId, keyId and tokenKeyFile are all required")
            }
            let appleID: (String) throws(ValueProblem) -> String = { v throws(ValueProblem) in
                guard v.count == 10, v.allSatisfy({ $0.isASCII && ($0.isUppercase || $0.isNumber) }) else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) is not a 10-character Apple ID (upper-case letters and digits)")
                }
                return v
            }
            return .token(
                teamID: try value("teamId", appleID)!, keyID: try value("keyId", appleID)!,
                tokenKeyFile: resolver.resolve(try nonEmpty("tokenKeyFile")!))
        }
        if !certificateEntries.isEmpty {
            if let missing = certificateKeys.first(where: { key in !certificateEntries.contains { $0.0 == key } }) {
                throw error(.missingKey, line: section.line, key: missing,
                    "certificate auth incomplete: certFile and keyFile are both required")
            }
            return .certificate(
                certFile: resolver.resolve(try nonEmpty("certFile")!), keyFile: resolver.resolve(try nonEmpty("keyFile")!))
        }
        throw error(.missingKey, line: section.line, key: nil,
            "no credentials: give teamId, keyId and tokenKeyFile (token auth) or certFile and keyFile (certificate auth)")
    }
}
