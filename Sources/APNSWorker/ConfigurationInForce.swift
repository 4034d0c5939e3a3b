import APNSConfig
import Foundation

/// The configuration a running worker uses, as the admin surface shows it (`/api/status`, the
/// page): when it was read, its fingerprint (`LoadedConfiguration.fingerprint`, which
/// `check-config` prints for a file), its bundles, and the restart-only sections whose change
/// was read but waits for a restart.
public struct ConfigurationInForce: Sendable, Hashable, Codable {
    public var loadedAt: Date
    public var fingerprint: String
    public var bundles: [String]
    /// `[amqp]`, `[admin]`, … changed in the file since start-up: not applied until a restart.
    public var pendingRestart: [String]

    public init(loadedAt: Date, fingerprint: String, bundles: [String], pendingRestart: [String] = []) {
        self.loadedAt = loadedAt
        self.fingerprint = fingerprint
        self.bundles = bundles
        self.pendingRestart = pendingRestart
    }

    public init(_ loaded: LoadedConfiguration, pendingRestart: [String] = []) {
        self.init(
            loadedAt: loaded.loadedAt, fingerprint: loaded.fingerprint, bundles: loaded.configuration.bundles.map(\.bundleID),
            pendingRestart: pendingRestart)
    }
}
