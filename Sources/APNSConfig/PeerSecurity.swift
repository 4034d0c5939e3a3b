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

    /// The host of an AMQP URL (`scheme://[userinfo@]host[:port]/…`) read as the AMQP client
    /// (`AMQPURL(string:)`) reads it, step for step, so that the warning is about the host the
    /// worker connects to: the authority runs to the first `/` (`?` and `#` end nothing there:
    /// `amqp://127.0.0.1?@rabbit.example.com` connects to rabbit.example.com, where a generic
    /// URL reader sees 127.0.0.1), the host follows its last `@`, brackets removed, and is
    /// percent-decoded; characters, not bytes (an `@` with a combining mark is no `@` to the
    /// client). Nil if empty (the client's `localhost`) or badly encoded. Public for the fuzz
    /// target `FuzzPeerHost`, which holds it to the client's reading. Read by hand, not with
    /// `URLComponents`: this runs in every `apns-worker run`, and Foundation's URL parser was the
    /// worker's only path into ICU's IDNA tables, resident for the process's life (0.3 MiB of
    /// the kit's peak; docs/benchmarks.md, "Resident memory").
    public static func host(of url: String) -> String? {
        guard let colon = url.firstIndex(of: ":"), url[colon...].hasPrefix("://") else { return nil }
        var authority = url[url.index(colon, offsetBy: 3)...]
        if let slash = authority.firstIndex(of: "/") { authority = authority[..<slash] }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        let host: Substring
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
        } else if let portColon = authority.lastIndex(of: ":") {
            host = authority[..<portColon]
        } else {
            host = authority
        }
        guard !host.isEmpty, let decoded = percentDecoded(Array(host.utf8)[...]) else { return nil }
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
