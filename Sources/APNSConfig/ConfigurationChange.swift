import APNSModel
import Crypto
import Foundation

/// What changed between the configuration in force and one read again while running (contract
/// §3, "Changes while running"), as pure values: which bundles were added, removed, given new
/// credentials or endpoints, or other keys; whether `[retry]` changed; which restart-only
/// sections changed. The worker applies it (`APNSWorker.ConfigurationReloader`); here nothing
/// opens a file or a socket.
///
/// A credential file is compared by its content's digest, not its path alone: a key rotated in
/// place (Kubernetes swaps the secret's directory under the same path) is a credential change,
/// and a file rewritten with the same bytes is none.
public struct ConfigurationChange: Sendable, Hashable {
    /// Bundles configured now and not before, in file order.
    public var added: [BundleConfiguration] = []
    /// Bundle IDs configured before and not now.
    public var removed: [String] = []
    /// Bundles whose connections must be replaced: a credential, an endpoint or another key
    /// the transports are built from changed (`BundleChange.keys` says which).
    public var reconnected: [BundleChange] = []
    /// Bundles whose other keys changed (the rollout gate): applied to jobs taken after.
    public var updated: [BundleChange] = []
    /// `[retry]` changed: applied to jobs taken after.
    public var retryChanged = false
    /// Changed sections that only a restart applies (`[amqp]`, `[admin]`, `[registry]`,
    /// `[tracing]`, `[worker]`), as `[name]`, in this order.
    public var restartOnly: [String] = []

    public init() {}

    /// Nothing to apply and nothing to report.
    public var isEmpty: Bool {
        added.isEmpty && removed.isEmpty && reconnected.isEmpty && updated.isEmpty && !retryChanged && restartOnly.isEmpty
    }

    /// Whether applying it changes anything in the running worker (restart-only news does not).
    public var needsApplying: Bool {
        !added.isEmpty || !removed.isEmpty || !reconnected.isEmpty || !updated.isEmpty || retryChanged
    }

    /// The sections and keys the change touches, one item each, for the log line that reports
    /// it: `added [apns "a"]`, `[apns "b"] tokenKeyFile (content)`, `[retry]`. No values: a
    /// value may be a secret.
    public var summary: [String] {
        var items: [String] = added.map { "added [apns \"\($0.bundleID)\"]" }
        items += removed.map { "removed [apns \"\($0)\"]" }
        items += (reconnected + updated).map { "[apns \"\($0.bundleID)\"] \($0.keys.joined(separator: ", "))" }
        if retryChanged { items.append("[retry]") }
        return items
    }
}

/// One bundle present before and after, and the keys that differ (the configuration's
/// spelling; a credential file whose content alone changed is `tokenKeyFile (content)`).
public struct BundleChange: Sendable, Hashable {
    public var bundleID: String { new.bundleID }
    public var old: BundleConfiguration
    public var new: BundleConfiguration
    public var keys: [String]

    public init(old: BundleConfiguration, new: BundleConfiguration, keys: [String]) {
        self.old = old
        self.new = new
        self.keys = keys
    }
}

/// A configuration as it was read, with a digest of every file it names, so that a later read
/// can tell a rotated key from the same one.
public struct LoadedConfiguration: Sendable, Hashable {
    public var configuration: WorkerConfiguration
    /// SHA-256 (hex) of the content of each file the configuration names, by its path as
    /// configured; a file that could not be read has no entry.
    public var fileDigests: [String: String]
    /// When it was read (for `check-config` and the admin page).
    public var loadedAt: Date

    public init(configuration: WorkerConfiguration, fileDigests: [String: String], loadedAt: Date) {
        self.configuration = configuration
        self.fileDigests = fileDigests
        self.loadedAt = loadedAt
    }

    /// The change from `self` (in force) to `next` (read again).
    public func change(to next: LoadedConfiguration) -> ConfigurationChange {
        var change = ConfigurationChange()
        let before = Dictionary(configuration.bundles.map { ($0.bundleID, $0) }, uniquingKeysWith: { first, _ in first })
        let after = Set(next.configuration.bundles.map(\.bundleID))
        change.added = next.configuration.bundles.filter { before[$0.bundleID] == nil }
        change.removed = configuration.bundles.map(\.bundleID).filter { !after.contains($0) }
        for bundle in next.configuration.bundles {
            guard let old = before[bundle.bundleID] else { continue }
            var transportKeys = Self.transportKeys(old, bundle, oldDigests: fileDigests, newDigests: next.fileDigests)
            let otherKeys = Self.otherKeys(old, bundle)
            // A key this comparison does not name (one added to the section later) still counts,
            // and on the safe side: new connections built from everything.
            if transportKeys.isEmpty, otherKeys.isEmpty, Self.withoutLine(old) != Self.withoutLine(bundle) {
                transportKeys.append("other keys")
            }
            if !transportKeys.isEmpty {
                change.reconnected.append(BundleChange(old: old, new: bundle, keys: transportKeys + otherKeys))
            } else if !otherKeys.isEmpty {
                change.updated.append(BundleChange(old: old, new: bundle, keys: otherKeys))
            }
        }
        change.retryChanged = configuration.retry != next.configuration.retry
        change.restartOnly = Self.restartOnlySections(configuration, next.configuration, oldDigests: fileDigests, newDigests: next.fileDigests)
        return change
    }

    /// Every file the configuration names: the bundles' credentials and CA files, the broker's
    /// CA file, the admin's certificate and key, the registry's root certificate.
    public static func namedFiles(_ configuration: WorkerConfiguration) -> [String] {
        var files: [String] = []
        for bundle in configuration.bundles { files += bundleFiles(bundle) }
        files += [configuration.amqp.caFile, configuration.admin.certFile, configuration.admin.keyFile].compactMap { $0 }
        if let root = configuration.registry?.url.rootCertificateFile { files.append(root) }
        var seen = Set<String>()
        return files.filter { seen.insert($0).inserted }
    }

    static func bundleFiles(_ bundle: BundleConfiguration) -> [String] {
        var files: [String] = []
        switch bundle.auth {
        case .token(_, _, let keyFile): files.append(keyFile)
        case .certificate(let certFile, let keyFile): files += [certFile, keyFile]
        }
        if let caFile = bundle.caFile { files.append(caFile) }
        return files
    }

    /// Keys from which the bundle's transports are built: a change to any of them needs new
    /// connections. The credentials (and their files' content), the endpoint, and how the
    /// connections are made.
    static func transportKeys(
        _ old: BundleConfiguration, _ new: BundleConfiguration, oldDigests: [String: String], newDigests: [String: String]
    ) -> [String] {
        var keys: [String] = []
        switch (old.auth, new.auth) {
        case (.token(let oldTeam, let oldKey, let oldFile), .token(let newTeam, let newKey, let newFile)):
            if oldTeam != newTeam { keys.append("teamId") }
            if oldKey != newKey { keys.append("keyId") }
            if oldFile != newFile {
                keys.append("tokenKeyFile")
            } else if oldDigests[oldFile] != newDigests[newFile] {
                keys.append("tokenKeyFile (content)")
            }
        case (.certificate(let oldCert, let oldKeyFile), .certificate(let newCert, let newKeyFile)):
            for (key, oldPath, newPath) in [("certFile", oldCert, newCert), ("keyFile", oldKeyFile, newKeyFile)] {
                if oldPath != newPath {
                    keys.append(key)
                } else if oldDigests[oldPath] != newDigests[newPath] {
                    keys.append("\(key) (content)")
                }
            }
        default:
            keys.append("authentication (\(old.auth.kindName) → \(new.auth.kindName))")
        }
        if old.transport != new.transport { keys.append("transport") }
        if old.environment != new.environment { keys.append("environment") }
        if old.host != new.host { keys.append("host") }
        if old.port != new.port { keys.append("port") }
        if old.caFile != new.caFile {
            keys.append("caFile")
        } else if let caFile = new.caFile, oldDigests[caFile] != newDigests[caFile] {
            keys.append("caFile (content)")
        }
        if old.connections != new.connections { keys.append("connections") }
        if old.binaryHoldWindow != new.binaryHoldWindow { keys.append("binaryHoldWindow") }
        if old.feedbackInterval != new.feedbackInterval { keys.append("feedbackInterval") }
        if old.feedbackPort != new.feedbackPort { keys.append("feedbackPort") }
        if old.channelHost != new.channelHost { keys.append("channelHost") }
        if old.channelPort != new.channelPort { keys.append("channelPort") }
        // What the key may sign for: each unit's transport refuses by it (`PerEnvironmentTransport`).
        if old.keyScope.environment != new.keyScope.environment { keys.append("keyEnvironment") }
        if old.keyScope.topics != new.keyScope.topics { keys.append("keyTopics") }
        return keys
    }

    /// Keys that apply to jobs taken after the change, connections kept.
    static func otherKeys(_ old: BundleConfiguration, _ new: BundleConfiguration) -> [String] {
        var keys: [String] = []
        if old.rollout.allowSyncServers != new.rollout.allowSyncServers { keys.append("allowSyncServers") }
        if old.rollout.denySyncServers != new.rollout.denySyncServers { keys.append("denySyncServers") }
        if old.rollout.percentage != new.rollout.percentage { keys.append("rolloutPercentage") }
        if old.events != new.events { keys.append("events") }
        return keys
    }

    /// The restart-only sections that differ, as `[name]`. Where a value was set (its line) is
    /// not a change; a file named there whose content changed is.
    static func restartOnlySections(
        _ old: WorkerConfiguration, _ new: WorkerConfiguration, oldDigests: [String: String], newDigests: [String: String]
    ) -> [String] {
        func contentChanged(_ files: [String?]) -> Bool {
            files.compactMap { $0 }.contains { oldDigests[$0] != newDigests[$0] }
        }
        var sections: [String] = []
        if old.amqp != new.amqp || contentChanged([new.amqp.caFile]) { sections.append("[amqp]") }
        if old.admin != new.admin || contentChanged([new.admin.certFile, new.admin.keyFile]) { sections.append("[admin]") }
        if old.registry.map(Self.withoutLocation) != new.registry.map(Self.withoutLocation)
            || contentChanged([new.registry?.url.rootCertificateFile])
        {
            sections.append("[registry]")
        }
        if old.tracing.map(Self.withoutLocation) != new.tracing.map(Self.withoutLocation) { sections.append("[tracing]") }
        if old.worker != new.worker { sections.append("[worker]") }
        return sections
    }

    static func withoutLine(_ bundle: BundleConfiguration) -> BundleConfiguration {
        var bundle = bundle
        bundle.line = nil
        return bundle
    }

    static func withoutLocation(_ registry: RegistrySettings) -> RegistrySettings {
        var registry = registry
        registry.urlLocation = .environment(variable: "")
        return registry
    }

    static func withoutLocation(_ tracing: TracingSettings) -> TracingSettings {
        var tracing = tracing
        tracing.endpointLocation = .environment(variable: "")
        return tracing
    }
}

extension LoadedConfiguration {
    /// Reads and validates the configuration as at start-up (credential files opened and
    /// checked), then digests every file it names.
    public static func read(
        path: String, environment: [String: String] = ProcessInfo.processInfo.environment, now: Date = Date()
    ) throws(ConfigurationError) -> LoadedConfiguration {
        let configuration = try ConfigurationLoader.load(path: path, environment: environment, credentials: .verifyFiles)
        return LoadedConfiguration(configuration: configuration, fileDigests: digests(of: namedFiles(configuration)), loadedAt: now)
    }

    /// The content digest of each file (`BoundedFile.digest`).
    public static func digests(of files: [String]) -> [String: String] {
        Dictionary(files.map { ($0, BoundedFile.digest($0, limit: BoundedFile.credentialLimit)) }, uniquingKeysWith: { first, _ in first })
    }

    /// What is in force once `next` is applied: `next`, except the restart-only sections (and
    /// the digests of the files they name), which keep their values until a restart.
    public func applying(_ next: LoadedConfiguration) -> LoadedConfiguration {
        var merged = next
        merged.configuration.amqp = configuration.amqp
        merged.configuration.admin = configuration.admin
        merged.configuration.worker = configuration.worker
        merged.configuration.registry = configuration.registry
        merged.configuration.tracing = configuration.tracing
        let kept = [configuration.amqp.caFile, configuration.admin.certFile, configuration.admin.keyFile,
                    configuration.registry?.url.rootCertificateFile].compactMap { $0 }
        for file in kept { merged.fileDigests[file] = fileDigests[file] }
        return merged
    }

    /// Without the bundles in `bundleIDs` (their new units could not be made: they count as
    /// not configured, so the next read adds them again).
    public func removingBundles(_ bundleIDs: Set<String>) -> LoadedConfiguration {
        var copy = self
        copy.configuration.bundles.removeAll { bundleIDs.contains($0.bundleID) }
        return copy
    }
}

extension LoadedConfiguration {
    /// A short digest of the configuration's values and of the content of every file it names:
    /// `check-config` prints it for a file, the admin page shows it for the configuration in
    /// force, so an operator sees whether a running worker runs what the file says. Where a
    /// value was set (its line) does not count.
    public var fingerprint: String {
        var normalized = configuration
        for index in normalized.bundles.indices { normalized.bundles[index].line = nil }
        normalized.registry = normalized.registry.map(Self.withoutLocation)
        normalized.tracing = normalized.tracing.map(Self.withoutLocation)
        var text = String(reflecting: normalized)
        for (path, digest) in fileDigests.sorted(by: { $0.key < $1.key }) { text += "\n\(path) \(digest)" }
        return SHA256.hash(data: Data(text.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
    }
}
