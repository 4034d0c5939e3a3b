/// The admin's access decisions as values, apart from the HTTP plumbing (`AdminAuthentication`)
/// so that they are tested and fuzzed alone: which `Host` a token-less admin answers, the
/// browser session that `POST /login` hands out instead of the token, and the bound on
/// operator requests served at once. The access model is in docs/decisions.md.
import Crypto
import Foundation
import Synchronization

/// The host names a token-less (loopback) admin answers to: its listen address, the loopback
/// names, and `[admin] allowedHosts`. Without it any web page the operator opens could bind
/// its own domain name to 127.0.0.1 (DNS rebinding) and then count as same-origin.
public struct AdminHostAllowlist: Sendable, Hashable {
    public let names: Set<String>

    public init(listenHost: String, allowed: [String] = []) {
        var names: Set<String> = ["localhost", "127.0.0.1", "::1"]
        names.insert(Self.normalized(listenHost))
        for name in allowed { names.insert(Self.normalized(name)) }
        self.names = names
    }

    /// Whether a request whose `Host` (HTTP/1.1) or `:authority` (HTTP/2) is `authority` may be
    /// answered. A request without one is refused: every browser sends it.
    public func allows(_ authority: String?) -> Bool {
        guard let authority, let host = Self.host(ofAuthority: authority) else { return false }
        return names.contains(host)
    }

    /// The host of `host`, `host:port`, `[v6]` or `[v6]:port`, normalized; nil when malformed.
    static func host(ofAuthority authority: String) -> String? {
        var host = Substring(authority)
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let after = host[host.index(after: close)...]
            guard after.isEmpty || (after.hasPrefix(":") && after.dropFirst().allSatisfy(\.isASCIIDigit)) else { return nil }
            host = host[host.index(after: host.startIndex)..<close]
        } else if let colon = host.lastIndex(of: ":") {
            guard host[host.index(after: colon)...].allSatisfy(\.isASCIIDigit), host.firstIndex(of: ":") == colon else { return nil }
            host = host[..<colon]
        }
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace || $0 == "@" || $0 == "/" }) else { return nil }
        return normalized(String(host))
    }

    /// Lower case, without a trailing dot (`localhost.` is `localhost`) or IPv6 brackets.
    static func normalized(_ name: String) -> String {
        var name = name.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        while name.hasSuffix(".") { name.removeLast() }
        return name
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}

/// The browser session of an admin with a token: `POST /login` with the token answers a cookie
/// that is NOT the token (a stolen cookie expires, and never reveals the token), made of an
/// expiry, a random nonce and an HMAC-SHA256 over both keyed by a key derived from the token.
/// Stateless, so every instance behind one address accepts the others' sessions, and changing
/// the token ends every session.
public struct AdminSessions: Sendable {
    public static let cookieName = "apns_admin_session"
    /// How long a session lasts: one working day.
    public static let defaultLifetime: Duration = .seconds(8 * 3600)

    let key: SymmetricKey
    public let lifetime: Duration

    public init(token: String, lifetime: Duration = defaultLifetime) {
        // A key of its own (not the token itself), so a MAC never doubles as a token check.
        key = SymmetricKey(data: SHA256.hash(data: Data("apns-worker admin session v1\u{0}\(token)".utf8)))
        self.lifetime = lifetime
    }

    /// A new session's cookie value, valid until `now + lifetime`.
    public func issue(now: Date) -> String {
        let expiry = Int64(now.timeIntervalSince1970) + lifetime.components.seconds
        let nonce = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let claims = "v1.\(expiry).\(nonce)"
        return "\(claims).\(mac(claims))"
    }

    /// Whether `value` is a session this token issued that has not expired at `now`.
    public func isValid(_ value: String, now: Date) -> Bool {
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "v1", let expiry = Int64(parts[1]), parts[2].count == 32,
            let presented = Data(hex: parts[3])
        else { return false }
        let claims = parts[0...2].joined(separator: ".")
        // Constant time: the check must not tell how much of a forged MAC was right.
        guard HMAC<SHA256>.isValidAuthenticationCode(presented, authenticating: Data(claims.utf8), using: key) else { return false }
        return Double(expiry) > now.timeIntervalSince1970
    }

    /// The `Set-Cookie` value of a new session; `Secure` when the admin is served over TLS.
    public func setCookie(now: Date, secure: Bool) -> String {
        var cookie = "\(Self.cookieName)=\(issue(now: now)); Path=/; Max-Age=\(lifetime.components.seconds); HttpOnly; SameSite=Strict"
        if secure { cookie += "; Secure" }
        return cookie
    }

    private func mac(_ claims: String) -> String {
        HMAC<SHA256>.authenticationCode(for: Data(claims.utf8), using: key).map { String(format: "%02x", $0) }.joined()
    }
}

extension Data {
    /// Lower- or upper-case hex, an even number of digits; nil otherwise.
    fileprivate init?(hex: Substring) {
        guard hex.count % 2 == 0, hex.count <= 128 else { return nil }
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        self.init(bytes)
    }
}

/// How many operator requests (anything but the probes and metrics) are served at once; one
/// beyond is answered 503 at once rather than queued, so a burst of listings cannot hold
/// thousands of messages each in the worker's memory.
public final class AdminRequestGate: Sendable {
    public let limit: Int
    private let inFlight = Mutex(0)

    public init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Takes a place; false when `limit` requests are already being served.
    public func enter() -> Bool {
        inFlight.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    public func leave() {
        inFlight.withLock { $0 = max(0, $0 - 1) }
    }

    public var current: Int { inFlight.withLock { $0 } }
}
