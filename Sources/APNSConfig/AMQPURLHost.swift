/// The host of an AMQP URL (`scheme://[userinfo@]host[:port]/…`) read as the AMQP client
/// (`AMQPURL(string:)`) reads it, step for step: the one reader of it in the configuration, for
/// the load-time check (`ConfigurationLoader.checkAMQPURL`) and the start-up warning about
/// plaintext brokers (`PeerSecurity.host(of:)`), so that the two never disagree about which host a
/// URL names. The authority runs to the first `/` (`?` and `#` end nothing there:
/// `amqp://127.0.0.1?@rabbit.example.com` connects to rabbit.example.com, where a generic URL
/// reader sees 127.0.0.1); the host follows its last `@`, brackets removed, up to the port's `:`
/// outside brackets, and is percent-decoded; characters, not bytes (an `@` with a combining mark
/// is no `@` to the client). Read by hand, not with `URLComponents`: Foundation's URL parser
/// reaches ICU's IDNA tables (docs/benchmarks.md, "Resident memory").
enum AMQPURLHost: Equatable, Sendable {
    /// A host written without brackets, percent-decoded, not empty.
    case name(String)
    /// A host written in brackets (an IPv6 address), percent-decoded, not empty.
    case bracketed(String)
    /// No host (the client connects to `localhost`): `amqp://u:p@/`, `amqp://:5672`, `amqp://[]`.
    case empty
    /// A `[` without its `]`: the client refuses the URL.
    case unterminatedBracket
    /// A `%` not followed by two hex digits, or bytes that are not UTF-8 once decoded: the client
    /// refuses the URL.
    case badPercentEncoding
    /// No `://` after the scheme.
    case notAURL

    init(reading url: String) {
        guard let colon = url.firstIndex(of: ":"), url[colon...].hasPrefix("://") else {
            self = .notAURL
            return
        }
        var authority = url[url.index(colon, offsetBy: 3)...]
        if let slash = authority.firstIndex(of: "/") { authority = authority[..<slash] }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        let host: Substring
        let bracketed = authority.hasPrefix("[")
        if bracketed {
            guard let close = authority.firstIndex(of: "]") else {
                self = .unterminatedBracket
                return
            }
            host = authority[authority.index(after: authority.startIndex)..<close]
        } else if let portColon = authority.lastIndex(of: ":") {
            host = authority[..<portColon]
        } else {
            host = authority
        }
        if host.isEmpty {
            self = .empty
        } else if let decoded = Self.percentDecoded(Array(host.utf8)[...]) {
            self = bracketed ? .bracketed(decoded) : .name(decoded)
        } else {
            self = .badPercentEncoding
        }
    }

    /// The host the client connects to; nil when it has none of its own or refuses the URL.
    var host: String? {
        switch self {
        case .name(let host), .bracketed(let host): host
        case .empty, .unterminatedBracket, .badPercentEncoding, .notAURL: nil
        }
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
}
