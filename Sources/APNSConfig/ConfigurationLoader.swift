import AMQPURLSyntax
import APNSModel
import APNSTopologyNames
import Configuration
import Foundation

/// Builds a `WorkerConfiguration` from a gcfg file and `APNS_WORKER_<SECTION>_<KEY>`
/// environment overrides, and validates everything before the worker starts.
///
/// Decisions the contract leaves open, documented in `config/apns-worker.conf` as well:
/// - relative paths in the file (`tokenKeyFile`, `certFile`, `keyFile`, `caFile`) are resolved
///   against the directory of the configuration file, so a config and its credentials can
///   move together; paths from environment variables are resolved against the working directory;
/// - an environment variable that is set but empty counts as unset;
/// - a `APNS_WORKER_<SECTION>_…` variable for one of our global sections with an unknown key
///   is an error (a typo would otherwise be silently ignored); `APNS_WORKER_AMQP_URL` holds a
///   comma-separated failover list;
/// - `[amqp] url` is required; there is no default broker.
public enum ConfigurationLoader {
    /// Whether credential files are opened and checked.
    public enum CredentialValidation: Sendable, Hashable {
        /// Open every key, certificate and CA file and check format and pairing (what the
        /// worker and `check-config` do).
        case verifyFiles
        /// Check the file's syntax and values only: for shipped examples whose credential
        /// paths do not exist on this machine.
        case skipFiles
    }

    /// The global sections and their keys as documented (the spelling used in messages).
    public static let globalSections: [(name: String, keys: [String])] = [
        ("amqp", ["url", "prefetch", "maxInFlight", "heartbeat", "queueType", "caFile"]),
        ("retry", ["delays", "maxAttempts"]),
        ("admin", ["listen", "token", "metricsToken", "heartbeatInterval", "allowedHosts", "certFile", "keyFile"]),
        ("worker", ["shutdownDeadline", "requestTimeout", "connectTimeout", "probeInterval", "providerTokenRefresh", "maxDeliveries"]),
        ("registry", registryKeys),
        ("tracing", tracingKeys),
    ]
    /// The keys of an `[apns "bundle.id"]` section.
    public static let bundleKeys = [
        "transport", "environment", "domain", "teamId", "keyId", "tokenKeyFile", "certFile", "keyFile",
        "host", "port", "caFile", "connections", "allowSyncServers", "denySyncServers", "rolloutPercentage",
        "binaryHoldWindow", "feedbackInterval", "feedbackPort", "channelHost", "channelPort", "events",
    ] + BundleReader.keyScopeKeys
    static let multiValuedKeys: Set<String> = ["amqp.url"]
    static let secretKeys: Set<String> = ["amqp.url", "admin.token", "admin.metricstoken", "registry.url"]
    /// The prefix of environment overrides.
    public static let environmentPrefix = "APNS_WORKER_"

    /// The environment variable that overrides `[section] key`: `APNS_WORKER_RETRY_MAXATTEMPTS`.
    public static func environmentVariable(section: String, key: String) -> String {
        "\(environmentPrefix)\(section.uppercased())_\(key.uppercased())"
    }

    /// Reads, parses and validates the file at `path`.
    public static func load(
        path: String,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        credentials: CredentialValidation = .verifyFiles
    ) throws(ConfigurationError) -> WorkerConfiguration {
        try load(document: ConfigDocument.load(path: path), environment: environment, credentials: credentials)
    }

    /// Validates an already parsed document; relative paths resolve against its path's directory.
    public static func load(
        document: ConfigDocument,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        credentials: CredentialValidation = .verifyFiles
    ) throws(ConfigurationError) -> WorkerConfiguration {
        try checkStructure(document)
        let overrides = try environmentOverrides(environment)
        let settings = LayeredSettings(document: document, environment: overrides)
        let baseDirectory = URL(fileURLWithPath: document.path).deletingLastPathComponent()
        let fileResolver = PathResolver(base: baseDirectory)
        let cwdResolver = PathResolver(base: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))

        let amqp = try readAMQP(settings, document: document, fileResolver: fileResolver, cwdResolver: cwdResolver)
        let retry = try readRetry(settings)
        let admin = try readAdmin(settings, fileResolver: fileResolver, cwdResolver: cwdResolver)
        let worker = try readWorker(settings)
        let registry = try readRegistry(settings, document: document)
        let tracing = try readTracing(settings, document: document)
        // swift-otel reads the OTEL_* variables itself, and crashes on some: check them first.
        if tracing != nil { try OTelEnvironment.check(environment) }

        var bundles: [BundleConfiguration] = []
        var seenBundleIDs: [String: Int] = [:]
        for section in document.sections where section.name.lowercased() == "apns" {
            let bundle = try BundleReader(section: section, path: document.path, resolver: fileResolver).read()
            if let earlier = seenBundleIDs[bundle.bundleID.lowercased()] {
                throw ConfigurationError(
                    .duplicate, at: .file(path: document.path, line: section.line), section: section.displayName,
                    "the same bundle ID as the section at line \(earlier) (bundle IDs do not differ by case alone)")
            }
            seenBundleIDs[bundle.bundleID.lowercased()] = section.line
            bundles.append(bundle)
        }
        guard !bundles.isEmpty else {
            throw ConfigurationError(
                .noBundles, at: .file(path: document.path, line: nil),
                "no [apns \"bundle.id\"] section: configure at least one bundle")
        }

        try KeyScopeRules.check(bundles, document: document)

        var configuration = WorkerConfiguration(amqp: amqp, retry: retry, admin: admin, worker: worker, bundles: bundles)
        configuration.registry = registry
        configuration.tracing = tracing
        if credentials == .verifyFiles {
            try CredentialValidator.validate(configuration, document: document, settings: settings)
        }
        return configuration
    }

    // MARK: - Structure: sections and keys

    /// Unknown sections and keys, duplicate single-valued keys, bare keys: before any value is read,
    /// so the first problem in file order is the one reported.
    static func checkStructure(_ document: ConfigDocument) throws(ConfigurationError) {
        let path = document.path
        for section in document.sections {
            let name = section.name.lowercased()
            let known: [String]
            if name == "apns" {
                guard section.subsection != nil else {
                    throw ConfigurationError(
                        .syntax, at: .file(path: path, line: section.line), section: "[apns]",
                        "needs the bundle ID: [apns \"com.example.app\"]")
                }
                known = bundleKeys
            } else if let global = globalSections.first(where: { $0.name == name }) {
                if section.subsection != nil {
                    throw ConfigurationError(
                        .syntax, at: .file(path: path, line: section.line), section: section.displayName,
                        "[\(name)] takes no subsection")
                }
                known = global.keys
            } else {
                let all = globalSections.map { "[\($0.name)]" } + ["[apns \"bundle.id\"]"]
                throw ConfigurationError(
                    .unknownSection, at: .file(path: path, line: section.line), section: section.displayName,
                    "unknown section (known: \(all.joined(separator: ", ")))")
            }
            var firstLine: [String: Int] = [:]
            for entry in section.entries {
                let lower = entry.name.lowercased()
                guard let spelled = known.first(where: { $0.lowercased() == lower }) else {
                    throw ConfigurationError(
                        .unknownKey, at: .file(path: path, line: entry.line), section: section.displayName, key: entry.name,
                        "unknown key (known: \(known.joined(separator: ", ")))")
                }
                guard entry.value != nil else {
                    throw ConfigurationError(
                        .badValue, at: .file(path: path, line: entry.line), section: section.displayName, key: spelled,
                        "needs a value (\(spelled) = …)")
                }
                let qualified = "\(name).\(lower)"
                if let earlier = firstLine[lower], !(section.subsection == nil && multiValuedKeys.contains(qualified)) {
                    throw ConfigurationError(
                        .duplicate, at: .file(path: path, line: entry.line), section: section.displayName, key: spelled,
                        "set again (first at line \(earlier)); only url in [amqp] may repeat")
                }
                firstLine[lower] = firstLine[lower] ?? entry.line
            }
        }
    }

    /// The `APNS_WORKER_` variables of our global sections, empty ones dropped, unknown keys refused.
    static func environmentOverrides(_ environment: [String: String]) throws(ConfigurationError) -> [String: String] {
        var overrides: [String: String] = [:]
        for (variable, value) in environment where variable.hasPrefix(environmentPrefix) {
            let rest = variable.dropFirst(environmentPrefix.count)
            guard let global = globalSections.first(where: { rest.hasPrefix("\($0.name.uppercased())_") }) else {
                continue  // not one of ours: other parts of the program may use the prefix
            }
            guard global.keys.contains(where: { environmentVariable(section: global.name, key: $0) == variable }) else {
                let known = global.keys.map { environmentVariable(section: global.name, key: $0) }
                throw ConfigurationError(
                    .unknownKey, at: .environment(variable: variable), section: "[\(global.name)]",
                    "unknown override (known: \(known.joined(separator: ", ")))")
            }
            if !value.isEmpty { overrides[variable] = value }
        }
        return overrides
    }

    // MARK: - Global sections

    static func readAMQP(
        _ settings: LayeredSettings, document: ConfigDocument, fileResolver: PathResolver, cwdResolver: PathResolver
    ) throws(ConfigurationError) -> AMQPSettings {
        guard let urls = settings.strings("amqp", "url") else {
            let header = document.sections.first { $0.name.lowercased() == "amqp" && $0.subsection == nil }
            throw ConfigurationError(
                .missingKey, at: .file(path: document.path, line: header?.line), section: "[amqp]", key: "url",
                "missing: at least one url = amqp://user:password@host:5672/%2f is required (or set APNS_WORKER_AMQP_URL)")
        }
        for (url, location) in urls {
            try settings.check(location, "amqp", "url") { () throws(ValueProblem) in try checkAMQPURL(url) }
        }
        var amqp = AMQPSettings(urls: urls.map(\.value))
        if let setting = settings.string("amqp", "prefetch") {
            amqp.prefetch = try settings.parse(setting, "amqp", "prefetch") { v throws(ValueProblem) in
                try ValueSyntax.int(v, in: 1...65535)
            }
            amqp.prefetchWritten = true
        }
        if let setting = settings.string("amqp", "maxInFlight") {
            amqp.maxInFlight = try settings.parse(setting, "amqp", "maxInFlight") { v throws(ValueProblem) in
                try ValueSyntax.int(v, in: 1...1_000_000)
            }
        }
        if let setting = settings.string("amqp", "heartbeat") {
            amqp.heartbeat = try settings.parse(setting, "amqp", "heartbeat") { v throws(ValueProblem) in
                let duration = try ValueSyntax.duration(v)
                // AMQP negotiates heartbeats in whole seconds, as a 16-bit number.
                guard duration.components.attoseconds == 0, duration >= .zero, duration <= .seconds(65535) else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) must be whole seconds from 0s (off) to 65535s")
                }
                return duration
            }
        }
        if let setting = settings.string("amqp", "queueType") {
            amqp.queueType = try settings.parse(setting, "amqp", "queueType") { v throws(ValueProblem) in
                guard let type = QueueType(rawValue: v.lowercased()) else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) is not a queue type (quorum or classic)")
                }
                return type
            }
        }
        if let setting = settings.string("amqp", "caFile") {
            let resolver = setting.location.isEnvironment ? cwdResolver : fileResolver
            amqp.caFile = resolver.resolve(setting.value)
        }
        return amqp
    }

    /// An `amqp://` or `amqps://` URL the AMQP client accepts, with a host of its own: read by
    /// `AMQPURLParts`, the client's own reader (and the plaintext warning's,
    /// `PeerSecurity.host(of:)`). Refused here, at load, with the file, line and key: what the
    /// client refuses only when it connects (a port that is empty or beyond 65535, two vhost
    /// segments, bad percent-encoding, a `[` without its `]`), no host (the client would connect
    /// to localhost: `amqp://u:p@/`, `amqp://rabbit?@/`, `amqp://[]`), and a host starting with `:`
    /// or holding whitespace (no name a resolver finds: an IPv6 address outside brackets, a typo).
    static func checkAMQPURL(_ url: String) throws(ValueProblem) {
        let quoted = ValueSyntax.quoted(AMQPSettings.maskingPassword(url))
        let parts: AMQPURLParts
        do {
            parts = try AMQPURLParts(parsing: url)
        } catch .scheme {
            throw ValueProblem("\(quoted) is not an AMQP URL (amqp://user:password@host:5672/vhost or amqps://…)")
        } catch .unterminatedBracket {
            throw ValueProblem("\(quoted) has no host: its IPv6 address has no closing ] (amqp://[::1]:5672/)")
        } catch .hostEncoding {
            throw ValueProblem("\(quoted) has bad percent-encoding in its host (% must be followed by two hex digits, decoding to UTF-8)")
        } catch {
            throw ValueProblem("\(quoted) is refused by the AMQP client: \(error)")
        }
        if !parts.hostInBrackets, parts.host.hasPrefix(":") {
            throw ValueProblem("\(quoted) has no host (an IPv6 address goes in brackets: amqp://[::1]:5672/)")
        }
        guard !parts.host.isEmpty, !url.contains(where: \.isWhitespace) else { throw ValueProblem("\(quoted) has no host") }
    }

    static func readRetry(_ settings: LayeredSettings) throws(ConfigurationError) -> RetrySettings {
        var retry = RetrySettings()
        if let setting = settings.string("retry", "delays") {
            retry.delays = try settings.parse(setting, "retry", "delays") { v throws(ValueProblem) in
                let items = try ValueSyntax.list(v)
                guard !items.isEmpty else { throw ValueProblem("needs at least one delay (e.g. 10s, 1m, 5m)") }
                var delays: [Duration] = []
                for item in items {
                    let delay = try ValueSyntax.duration(item)
                    // Delays become x-message-ttl: whole milliseconds, at least 1 ms, at most a week.
                    guard delay >= .milliseconds(1), delay <= .seconds(7 * 86400),
                        delay.components.attoseconds % 1_000_000_000_000_000 == 0
                    else {
                        throw ValueProblem("\(ValueSyntax.quoted(item)) must be whole milliseconds from 1ms to 168h")
                    }
                    delays.append(delay)
                }
                return delays
            }
        }
        if let setting = settings.string("retry", "maxAttempts") {
            retry.maxAttempts = try settings.parse(setting, "retry", "maxAttempts") { v throws(ValueProblem) in
                try ValueSyntax.int(v, in: 1...1000)
            }
        }
        return retry
    }

    static func readAdmin(
        _ settings: LayeredSettings, fileResolver: PathResolver, cwdResolver: PathResolver
    ) throws(ConfigurationError) -> AdminSettings {
        var admin = AdminSettings()
        if let setting = settings.string("admin", "listen") {
            admin.listen = try settings.parse(setting, "admin", "listen") { v throws(ValueProblem) in
                let (host, port) = try ValueSyntax.hostPort(v, portRange: 0...65535)
                return ListenAddress(host: host, port: port)
            }
        }
        for key in ["token", "metricsToken"] {
            guard let setting = settings.string("admin", key) else { continue }
            let token = try settings.parse(setting, "admin", key) { v throws(ValueProblem) in
                guard v.count >= 16, !v.contains(where: { $0.isWhitespace || !$0.isASCII }) else {
                    throw ValueProblem("must be at least 16 printable ASCII characters without spaces")
                }
                if let problem = PlaceholderSecrets.problem(v) { throw ValueProblem(problem) }
                return v
            }
            if key == "token" { admin.token = token } else { admin.metricsToken = token }
        }
        // The metrics token reads /metrics only, beside the admin token: alone it would leave
        // every other route open, and equal to it, it would not be read-only.
        if let metricsToken = admin.metricsToken, let setting = settings.string("admin", "metricsToken") {
            guard let token = admin.token else {
                throw ConfigurationError(
                    .conflict, at: setting.location, section: "[admin]", key: "metricsToken",
                    "needs token: the metrics token is a read-only credential beside the admin token (a token-less admin serves /metrics to anyone on loopback)")
            }
            guard metricsToken != token else {
                throw ConfigurationError(
                    .conflict, at: setting.location, section: "[admin]", key: "metricsToken",
                    "is the admin token: give Prometheus a token of its own, which reads /metrics and nothing else")
            }
        }
        if let setting = settings.string("admin", "heartbeatInterval") {
            admin.heartbeatInterval = try settings.parse(setting, "admin", "heartbeatInterval") { v throws(ValueProblem) in
                let value = try ValueSyntax.duration(v)
                guard (Duration.milliseconds(100) ... .seconds(300)).contains(value) else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) is out of range (100ms to 5m)")
                }
                return value
            }
        }
        if let setting = settings.string("admin", "allowedHosts") {
            admin.allowedHosts = try settings.parse(setting, "admin", "allowedHosts") { v throws(ValueProblem) in
                let names = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                for name in names where name.isEmpty || !name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-.:[]".contains($0)) }) {
                    throw ValueProblem("\(ValueSyntax.quoted(name)) is not a host name (comma-separated names or addresses)")
                }
                return names
            }
        }
        for key in ["certFile", "keyFile"] {
            guard let setting = settings.string("admin", key) else { continue }
            let resolver = setting.location.isEnvironment ? cwdResolver : fileResolver
            if key == "certFile" { admin.certFile = resolver.resolve(setting.value) } else { admin.keyFile = resolver.resolve(setting.value) }
        }
        if (admin.certFile == nil) != (admin.keyFile == nil) {
            let (given, missing) = admin.certFile == nil ? ("keyFile", "certFile") : ("certFile", "keyFile")
            let location = settings.string("admin", given)?.location ?? .file(path: settings.document.path, line: nil)
            throw ConfigurationError(
                .missingKey, at: location, section: "[admin]", key: missing,
                "required with \(given): the admin serves TLS with both a certificate and its key, or neither")
        }
        // Beyond loopback the admin API can requeue and purge jobs: never serve it unauthenticated.
        if admin.token == nil, !admin.listen.isLoopback {
            let location = settings.string("admin", "listen")?.location ?? .file(path: settings.document.path, line: nil)
            throw ConfigurationError(
                .missingKey, at: location, section: "[admin]", key: "token",
                "required when listen (\(admin.listen)) is not a loopback address: set token (16+ characters) or APNS_WORKER_ADMIN_TOKEN")
        }
        return admin
    }

    static func readWorker(_ settings: LayeredSettings) throws(ConfigurationError) -> WorkerSettings {
        var worker = WorkerSettings()
        func duration(
            _ key: String, _ range: ClosedRange<Duration>, _ rangeText: String
        ) throws(ConfigurationError) -> Duration? {
            guard let setting = settings.string("worker", key) else { return nil }
            return try settings.parse(setting, "worker", key) { v throws(ValueProblem) in
                let value = try ValueSyntax.duration(v)
                guard range.contains(value) else { throw ValueProblem("\(ValueSyntax.quoted(v)) is out of range (\(rangeText))") }
                return value
            }
        }
        if let d = try duration("shutdownDeadline", .zero ... .seconds(3600), "0s to 1h") { worker.shutdownDeadline = d }
        if let d = try duration("requestTimeout", .milliseconds(100) ... .seconds(300), "100ms to 5m") { worker.requestTimeout = d }
        if let d = try duration("connectTimeout", .milliseconds(100) ... .seconds(300), "100ms to 5m") { worker.connectTimeout = d }
        if let d = try duration("probeInterval", .milliseconds(100) ... .seconds(3600), "100ms to 1h") { worker.probeInterval = d }
        if let d = try duration("providerTokenRefresh", .seconds(20 * 60) ... .seconds(60 * 60), "20m to 60m, as Apple asks") {
            worker.providerTokenRefresh = d
        }
        if let setting = settings.string("worker", "maxDeliveries") {
            worker.maxDeliveries = try settings.parse(setting, "worker", "maxDeliveries") { v throws(ValueProblem) in
                try ValueSyntax.int(v, in: 1...10000)
            }
        }
        return worker
    }
}

/// Resolves relative paths against a base directory; absolute paths stay as they are.
struct PathResolver: Sendable {
    var base: URL
    func resolve(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        return URL(fileURLWithPath: path, relativeTo: base).standardizedFileURL.path
    }
}

extension ConfigLocation {
    var isEnvironment: Bool {
        if case .environment = self { return true }
        return false
    }
}

/// A value with where it came from.
struct Setting: Sendable {
    var value: String
    var location: ConfigLocation
}

/// The global sections through swift-configuration: environment overrides first, then the file.
struct LayeredSettings {
    let document: ConfigDocument
    private let reader: ConfigReader
    private let recorder = OriginRecorder()
    private let fileProvider: GcfgProvider

    init(document: ConfigDocument, environment: [String: String]) {
        self.document = document
        self.fileProvider = GcfgProvider(document: document, secretKeys: ConfigurationLoader.secretKeys)
        let secretVariables = Set(ConfigurationLoader.secretKeys.map { qualified in
            let parts = qualified.split(separator: ".")
            return ConfigurationLoader.environmentVariable(section: String(parts[0]), key: String(parts[1]))
        })
        // Our keys are read in lower case so the provider's camelCase splitting does not turn
        // `maxAttempts` into MAX_ATTEMPTS: the contract spells it APNS_WORKER_RETRY_MAXATTEMPTS.
        let environmentProvider = KeyMappingProvider(
            upstream: EnvironmentVariablesProvider(
                environmentVariables: environment, secretsSpecifier: .specific(secretVariables), arraySeparator: ",")
        ) { key in
            AbsoluteConfigKey(["apns", "worker"] + key.components.map { $0.lowercased() }, context: key.context)
        }
        self.reader = ConfigReader(providers: [environmentProvider, fileProvider], accessReporter: recorder)
    }

    private func location(section: String, key: String, fileEntry: ConfigEntry?) -> ConfigLocation {
        let origin = recorder.origin(section: section, key: key)
        if let origin, !origin.providerName.hasPrefix(GcfgProvider.namePrefix) {
            return .environment(variable: origin.encodedKey)
        }
        return .file(path: document.path, line: fileEntry?.line)
    }

    func string(_ section: String, _ key: String) -> Setting? {
        guard let value = reader.string(forKey: ConfigKey([section.lowercased(), key.lowercased()])) else { return nil }
        let entry = fileProvider.entries(section: section, key: key).last
        return Setting(value: value, location: location(section: section, key: key, fileEntry: entry))
    }

    /// A repeated key: each value with its own line when it comes from the file.
    func strings(_ section: String, _ key: String) -> [(value: String, location: ConfigLocation)]? {
        guard let values = reader.stringArray(forKey: ConfigKey([section.lowercased(), key.lowercased()])), !values.isEmpty
        else { return nil }
        let entries = fileProvider.entries(section: section, key: key)
        let origin = location(section: section, key: key, fileEntry: entries.first)
        if origin.isEnvironment {
            return values.map { ($0.trimmingWhitespace(), origin) }
        }
        return zip(values, entries).map { ($0, .file(path: document.path, line: $1.line)) }
    }

    func parse<T>(
        _ setting: Setting, _ section: String, _ key: String, _ parser: (String) throws(ValueProblem) -> T
    ) throws(ConfigurationError) -> T {
        do {
            return try parser(setting.value)
        } catch {
            throw ConfigurationError(.badValue, at: setting.location, section: "[\(section)]", key: key, error.message)
        }
    }

    func check(
        _ location: ConfigLocation, _ section: String, _ key: String, _ check: () throws(ValueProblem) -> Void
    ) throws(ConfigurationError) {
        do {
            try check()
        } catch {
            throw ConfigurationError(.badValue, at: location, section: "[\(section)]", key: key, error.message)
        }
    }
}
