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

    /// The host of a URL (`scheme://[userinfo@]host[:port]/…`), brackets removed and percent-decoded as
    /// the AMQP client decodes it; nil if none. Read by hand, not with `URLComponents`: this runs in
    /// every `apns-worker run`, and Foundation's URL parser was the worker's only path into ICU's
    /// IDNA tables, resident for the process's life (0.3 MiB of the kit's peak; docs/benchmarks.md,
    /// "Resident memory").
    static func host(of url: String) -> String? {
        let bytes = Array(url.utf8)
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), bytes[colon...].starts(with: "://".utf8) else { return nil }
        var authority = bytes[(colon + 3)...]
        if let end = authority.firstIndex(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) {
            authority = authority[..<end]
        }
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) { authority = authority[(at + 1)...] }
        var host = authority
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            host = authority[(authority.startIndex + 1)..<close]
        } else if let portColon = authority.lastIndex(of: UInt8(ascii: ":")) {
            host = authority[..<portColon]
        }
        guard !host.isEmpty, let decoded = percentDecoded(host) else { return nil }
        return decoded
    }

    /// `%XX` sequences as bytes, then UTF-8; nil when a sequence or the result is malformed.
    private static func percentDecoded(_ text: ArraySlice<UInt8>) -> String? {
        func hexValue(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var index = text.startIndex
        while index < text.endIndex {
            if text[index] == UInt8(ascii: "%") {
                guard index + 2 < text.endIndex, let high = hexValue(text[index + 1]), let low = hexValue(text[index + 2])
                else { return nil }
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(text[index])
                index += 1
            }
        }
        return String(validating: out, as: UTF8.self)
    }

    static func isLoopback(_ host: String) -> Bool {
        ListenAddress(host: host, port: 0).isLoopback
    }
}
