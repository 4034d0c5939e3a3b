/// One key the simulator accepts, as `apns-worker simulator --key` gives it:
/// `TEAM:KEYID:FILE[:ENVIRONMENT[:TOPIC,TOPIC…]]`. FILE is the `.p8` private key (what the worker
/// is given) or a PEM public key; ENVIRONMENT is `sandbox`, `production` or `both` (empty: both);
/// TOPICs make it a topic-specific key.
import APNSModel
import Crypto
import Foundation

public struct SimulatorKeySpec: Sendable, Hashable {
    public var teamID: String
    public var keyID: String
    public var path: String
    public var environment: APNSEnvironment?
    public var topics: [String]?

    /// Why a `--key` value cannot be used, in one line.
    public struct Problem: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    public static func parse(_ text: String) throws(Problem) -> SimulatorKeySpec {
        let usage = "use TEAM:KEYID:FILE[:sandbox|production|both[:TOPIC,TOPIC…]]"
        let parts = text.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard (3...5).contains(parts.count) else { throw Problem(description: "--key \(text): \(usage)") }
        for (name, id) in [("team ID", parts[0]), ("key ID", parts[1])] where !isAppleID(id) {
            throw Problem(description: "--key \(text): \"\(id)\" is not a \(name) (10 upper-case letters and digits)")
        }
        guard !parts[2].isEmpty else { throw Problem(description: "--key \(text): no key file; \(usage)") }
        var spec = SimulatorKeySpec(teamID: parts[0], keyID: parts[1], path: parts[2])
        if parts.count > 3 {
            switch parts[3].lowercased() {
            case "", "both": spec.environment = nil
            case "sandbox": spec.environment = .sandbox
            case "production": spec.environment = .production
            default: throw Problem(description: "--key \(text): \"\(parts[3])\" is not sandbox, production or both")
            }
        }
        if parts.count > 4 {
            let topics = parts[4].split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard !topics.contains(where: \.isEmpty) else { throw Problem(description: "--key \(text): an empty topic") }
            spec.topics = topics
        }
        return spec
    }

    /// The key with the public half of the file's key.
    public func load() throws(Problem) -> SimulatorTokenKey {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Problem(description: "--key: cannot read \(path)")
        }
        let pem = String(decoding: data, as: UTF8.self)
        let publicKey: P256.Signing.PublicKey
        if let privateKey = try? P256.Signing.PrivateKey(pemRepresentation: pem) {
            publicKey = privateKey.publicKey
        } else if let key = try? P256.Signing.PublicKey(pemRepresentation: pem) {
            publicKey = key
        } else {
            throw Problem(description: "--key: \(path) is not a PEM P-256 key (an APNs .p8 key or its public key)")
        }
        return SimulatorTokenKey(keyID: keyID, teamID: teamID, publicKey: publicKey, environment: environment, topics: topics)
    }

    private static func isAppleID(_ text: String) -> Bool {
        text.count == 10 && text.allSatisfy { $0.isASCII && ($0.isUppercase || $0.isNumber) }
    }
}
