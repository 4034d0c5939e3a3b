/// The one reader of `amqp://` and `amqps://` URLs (RabbitMQ's URI spec:
/// `amqp[s]://[user[:password]@]host[:port][/vhost]`, every part percent-decoded): the AMQP
/// client connects with what it reads (`AMQPURL(string:)`), and the configuration's check and
/// its plaintext warning read `[amqp] url` with it too, so `check-config` accepts exactly the URLs
/// the client does. Pure, the standard library only.
///
/// Read by hand, not with `URLComponents`: Foundation's URL parser reaches ICU's IDNA tables
/// (docs/benchmarks.md, "Resident memory"), and it reads URLs another way than RabbitMQ's spec.
/// The path runs from the first `/` (`?` and `#` end nothing: `amqp://127.0.0.1?@rabbit.example.com`
/// names rabbit.example.com); the host follows the last `@` before it, brackets removed, up to the
/// port's `:` outside brackets. Characters, not bytes: an `@` with a combining mark is no `@`.
public struct AMQPURLParts: Sendable, Hashable {
    public var tls: Bool
    /// Percent-decoded; empty when the URL names none (a client connects to `localhost`).
    public var host: String
    /// Whether the host was written in brackets (an IPv6 address).
    public var hostInBrackets: Bool
    /// 1…65535; nil when the URL names none.
    public var port: Int?
    /// Percent-decoded; nil when the URL names none.
    public var user: String?
    public var password: String?
    /// Percent-decoded; `/` when the URL has no path.
    public var vhost: String

    /// Why a URL is refused, in the words of the AMQP client's error.
    public enum Problem: Error, Sendable, Hashable, CustomStringConvertible {
        case scheme
        case vhostSegments
        case vhostEncoding
        case userEncoding
        case passwordEncoding
        case unterminatedBracket
        case junkAfterBracket
        case hostEncoding
        case port

        public var description: String {
            switch self {
            case .scheme: "the scheme must be amqp:// or amqps://"
            case .vhostSegments: "the vhost must be one path segment (write / as %2f)"
            case .vhostEncoding: "bad percent-encoding in the vhost"
            case .userEncoding: "bad percent-encoding in the user"
            case .passwordEncoding: "bad percent-encoding in the password"
            case .unterminatedBracket: "unterminated IPv6 address"
            case .junkAfterBracket: "junk after the IPv6 address"
            case .hostEncoding: "bad percent-encoding in the host"
            case .port: "the port must be 1…65535"
            }
        }
    }

    /// Reads `amqp://user:pass@host:5672/%2f`, the scheme in any case (RFC 3986 §3.1). No path
    /// means the default vhost `/`; `/%2f` is `/` too; `/name` is `name`.
    public init(parsing string: String) throws(Problem) {
        func hasScheme(_ prefix: String) -> Bool { string.prefix(prefix.count).lowercased() == prefix }
        var rest: Substring
        if hasScheme("amqp://") {
            tls = false
            rest = string.dropFirst("amqp://".count)
        } else if hasScheme("amqps://") {
            tls = true
            rest = string.dropFirst("amqps://".count)
        } else {
            throw .scheme
        }
        vhost = "/"
        if let slash = rest.firstIndex(of: "/") {
            let path = rest[rest.index(after: slash)...]
            guard !path.contains("/") else { throw .vhostSegments }
            guard let decoded = Self.percentDecoded(path) else { throw .vhostEncoding }
            vhost = decoded
            rest = rest[..<slash]
        }
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let parts = userInfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let user = Self.percentDecoded(parts[0]) else { throw .userEncoding }
            self.user = user
            if parts.count == 2 {
                guard let password = Self.percentDecoded(parts[1]) else { throw .passwordEncoding }
                self.password = password
            }
        }
        var host: Substring
        var portText: Substring?
        hostInBrackets = rest.hasPrefix("[")
        if hostInBrackets {
            guard let close = rest.firstIndex(of: "]") else { throw .unterminatedBracket }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw .junkAfterBracket }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard let decodedHost = Self.percentDecoded(host) else { throw .hostEncoding }
        self.host = decodedHost
        if let portText {
            // Digits only: `Int("+5672")` is 5672, but a sign is no part of a port.
            guard portText.allSatisfy(\.isASCIIDigit), let port = Int(portText), (1...65535).contains(port) else { throw .port }
            self.port = port
        }
    }

    /// `%XX` sequences as bytes, then UTF-8; nil when a sequence or the result is malformed.
    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
                bytes.append(high << 4 | low)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

private extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
