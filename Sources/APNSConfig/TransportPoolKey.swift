/// Which connection pool a bundle's notifications to one environment travel on
/// (docs/decisions.md, "Connection pools per credential"). Bundles whose keys
/// are equal share one pool and one provider token. Pure: the credential files' bytes come from
/// the caller, so the rules are tested without a file system.
import APNSModel
import Crypto
import Foundation

public struct TransportPoolKey: Sendable, Hashable, CustomStringConvertible {
    /// What authenticates the pool's connections.
    public enum Credential: Sendable, Hashable {
        /// A provider token key. Apple allows one team per connection and the team is part of
        /// the key, so a pool never mixes teams; the digest of the `.p8` file's bytes makes a
        /// rotated key under the same key ID a new pool (a new token, new connections: no
        /// `TooManyProviderTokenUpdates`), and a file rewritten with the same bytes the same one.
        case token(teamID: String, keyID: String, keyDigest: String)
        /// A TLS client certificate: the digest of the certificate and its key.
        case certificate(digest: String)
        /// The binary provider API: its frames carry no topic (the certificate decides it), so
        /// each bundle keeps a pool of its own.
        case binary(bundleID: String, digest: String)
    }

    public var host: String
    public var port: Int
    /// The digest of the `caFile` trusted instead of the system's roots; nil: the system's.
    public var trustDigest: String?
    public var environment: APNSEnvironment
    public var credential: Credential

    public init(host: String, port: Int, trustDigest: String?, environment: APNSEnvironment, credential: Credential) {
        self.host = host
        self.port = port
        self.trustDigest = trustDigest
        self.environment = environment
        self.credential = credential
    }

    /// The key of `bundle`'s pool for `environment`.
    /// - Parameter contents: the bytes of a credential or CA file named by the configuration.
    public init(bundle: BundleConfiguration, environment: APNSEnvironment, contents: (String) throws -> [UInt8]) rethrows {
        let (host, port) = bundle.endpoint(for: environment)
        let trust = try bundle.caFile.map { Self.digest([try contents($0)]) }
        let credential: Credential
        switch (bundle.transport, bundle.auth) {
        case (.binary, .certificate(let certFile, let keyFile)):
            credential = .binary(bundleID: bundle.bundleID, digest: Self.digest([try contents(certFile), try contents(keyFile)]))
        case (.binary, .token(_, _, let keyFile)):
            // The loader refuses this; a configuration built another way still gets its own pool.
            credential = .binary(bundleID: bundle.bundleID, digest: Self.digest([try contents(keyFile)]))
        case (.http2, .token(let teamID, let keyID, let keyFile)):
            credential = .token(teamID: teamID, keyID: keyID, keyDigest: Self.digest([try contents(keyFile)]))
        case (.http2, .certificate(let certFile, let keyFile)):
            credential = .certificate(digest: Self.digest([try contents(certFile), try contents(keyFile)]))
        }
        self.init(host: host, port: port, trustDigest: trust, environment: environment, credential: credential)
    }

    /// The most of a credential or CA file that is read: PEM keys and certificates are a few
    /// KiB, a CA bundle a few hundred; a path that names something larger (a device, a log) is a
    /// mistake, not something to read whole.
    public static let fileLimit = BoundedFile.credentialLimit

    /// The key of `bundle`'s pool for `environment`, reading the files it names (regular files
    /// only, at most `fileLimit` bytes: `BoundedFile`).
    /// - Throws: `TransportPoolKey.UnreadableFile` naming the bundle and the file.
    public static func reading(bundle: BundleConfiguration, environment: APNSEnvironment) throws -> TransportPoolKey {
        try TransportPoolKey(bundle: bundle, environment: environment) { path in
            do {
                return Array(try BoundedFile.read(path, limit: fileLimit))
            } catch {
                throw UnreadableFile(bundleID: bundle.bundleID, path: path, reason: "it \(error)")
            }
        }
    }

    public struct UnreadableFile: Error, CustomStringConvertible {
        public var bundleID: String
        public var path: String
        public var reason: String

        public var description: String { "[apns \"\(bundleID)\"] cannot read \(path): \(reason)" }
    }

    /// SHA-256 of the parts, each prefixed by its length so that no two splits of the same bytes
    /// (a certificate's end moved into its key) digest alike; lower-case hex.
    static func digest(_ parts: [[UInt8]]) -> String {
        var hash = SHA256()
        for part in parts {
            withUnsafeBytes(of: UInt64(part.count).bigEndian) { hash.update(bufferPointer: $0) }
            hash.update(data: part)
        }
        return hash.finalize().map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }

    /// A short name for logs, the admin page and the `pool` label: the credential (a digest's
    /// first 8 digits, never key material), the environment and the endpoint.
    public var description: String {
        let trust = trustDigest.map { " ca:\($0.prefix(8))" } ?? ""
        return "\(credentialName) \(environment.rawValue) \(host):\(port)\(trust)"
    }

    /// The credential part of `description`.
    public var credentialName: String {
        switch credential {
        case .token(let teamID, let keyID, let keyDigest): "token \(teamID)/\(keyID)#\(keyDigest.prefix(8))"
        case .certificate(let digest): "certificate #\(digest.prefix(8))"
        case .binary(let bundleID, let digest): "binary \(bundleID)#\(digest.prefix(8))"
        }
    }
}
