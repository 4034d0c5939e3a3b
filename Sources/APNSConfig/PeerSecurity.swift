import AMQPURLSyntax
import Foundation

/// Connections of a configuration that an attacker on the network between the worker and a
/// non-loopback peer could read or take over: plaintext AMQP (the broker credentials and every
/// job in clear), and PostgreSQL that may fall back to plaintext (`allow`, `prefer`: silently)
/// or uses TLS without verifying whom it talks to (`require` without `sslrootcert`). Each is
/// one warning line (passwords masked) that `apns-worker run` logs loudly at start-up and
/// `check-config` prints; none stops start-up, since a private network may be a choice.
public enum PeerSecurity {
    public static func warnings(_ configuration: WorkerConfiguration) -> [String] {
        var warnings: [String] = []
        for url in configuration.amqp.urls {
            guard url.lowercased().hasPrefix("amqp://"), let host = host(of: url), !isLoopback(host) else { continue }
            warnings.append(
                "[amqp] url \(AMQPSettings.maskingPassword(url)): plaintext AMQP to a non-loopback broker; "
                    + "its credentials and every job cross the network in clear (use amqps://)")
        }
        if let registry = configuration.registry, !isLoopback(registry.url.host) {
            let url = registry.url
            let problem: String? =
                switch url.sslMode {
                case .disable: "sslmode=disable: plaintext to a non-loopback database, password and device tokens in clear"
                case .allow, .prefer: "sslmode=\(url.sslMode.rawValue) falls back to plaintext without a word when TLS fails"
                    + (url.verifiesCertificate ? "" : ", and does not verify the server's certificate")
                case .require: url.verifiesCertificate ? nil : "sslmode=require encrypts but verifies no certificate: anyone on the path can pose as the database"
                case .verifyCA, .verifyFull: nil
                }
            if let problem {
                warnings.append("[registry] url \(url.masked): \(problem) (use sslmode=verify-full with sslrootcert=/path/to/ca.pem)")
            }
        }
        return warnings
    }

    /// The host of an AMQP URL as the AMQP client reads it (`AMQPURLParts`, which the loader's
    /// check of `[amqp] url` reads it with too), so that the warning is about the host the worker
    /// connects to. Nil if empty (the client's `localhost`) or a URL the client refuses. Public
    /// for the fuzz target `FuzzPeerHost`, which holds it to the client's reading.
    public static func host(of url: String) -> String? {
        guard let host = (try? AMQPURLParts(parsing: url))?.host, !host.isEmpty else { return nil }
        return host
    }

    static func isLoopback(_ host: String) -> Bool {
        ListenAddress(host: host, port: 0).isLoopback
    }
}
