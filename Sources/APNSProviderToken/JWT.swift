/// Provider authentication tokens (JWT, ES256) for the HTTP/2 provider API, and the renewal
/// policy that keeps one token per team key fresh without ever provoking Apple's
/// `TooManyProviderTokenUpdates`.
import APNSJSON
import Crypto
import Foundation

/// One signed provider token: `{alg: ES256, kid}` . `{iss: teamID, iat}` . raw ECDSA signature,
/// each part base64url without padding.
public struct ProviderToken: Sendable, Hashable {
    public let teamID: String
    public let keyID: String
    /// The `iat` claim: whole seconds, as signed.
    public let issuedAt: Date
    /// The compact JWT.
    public let jwt: String

    /// The value of the `authorization` request header, made once: every request carries it.
    public let authorization: String

    init(teamID: String, keyID: String, issuedAt: Date, jwt: String) {
        self.teamID = teamID
        self.keyID = keyID
        self.issuedAt = issuedAt
        self.jwt = jwt
        self.authorization = "bearer " + jwt
    }

    /// Signs a token issued at `issuedAt` (truncated to whole seconds, as `iat` is).
    public static func sign(
        teamID: String, keyID: String, key: P256.Signing.PrivateKey, issuedAt: Date
    ) throws -> ProviderToken {
        let iat = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        let header = FlatJSON.object(["alg": .string("ES256"), "kid": .string(keyID)])
        let claims = FlatJSON.object(["iss": .string(teamID), "iat": .integer(iat)])
        let signingInput = base64URL(Data(header)) + "." + base64URL(Data(claims))
        // JOSE wants the raw r||s form (64 bytes), not DER.
        let signature = try key.signature(for: Data(signingInput.utf8)).rawRepresentation
        return ProviderToken(
            teamID: teamID, keyID: keyID, issuedAt: Date(timeIntervalSince1970: TimeInterval(iat)),
            jwt: signingInput + "." + base64URL(signature))
    }

    /// Base64url without padding (RFC 7515 §2).
    public static func base64URL(_ data: Data) -> String {
        var s = data.base64EncodedString()
        s = s.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while s.hasSuffix("=") { s.removeLast() }
        return s
    }
}

/// When to sign a new provider token: a state machine over time given by the caller, so tests
/// drive the clock. One instance per team key, shared by every connection that uses the key.
///
/// Apple rejects a token older than one hour (`ExpiredProviderToken`) and one refreshed more
/// often than every 20 minutes (`TooManyProviderTokenUpdates`). The policy:
/// - a token is renewed once it is `maximumAge` old (20 to 60 minutes; default 50);
/// - on its own schedule, no two tokens are signed less than `minimumRenewalInterval` (20
///   minutes) apart, so `TooManyProviderTokenUpdates` cannot come from this process's routine;
/// - `ExpiredProviderToken` for the current token renews it at once, whatever its age (contract
///   §4): Apple says the token is stale (a skewed clock, a key rotated on Apple's side), and
///   resending it could only be refused again. If the renewed token is refused too, the caller
///   reports the answer and the bundle is held; so that a held bundle's probes cannot sign a
///   token every few seconds, renewals for `ExpiredProviderToken` are at least
///   `expiryRenewalSpacing` apart. An answer about an older token that has already been replaced
///   just uses the current one.
public struct ProviderTokenManager: Sendable {
    public static let minimumRenewalInterval: Duration = .seconds(20 * 60)
    public static let defaultMaximumAge: Duration = .seconds(50 * 60)
    public static let allowedMaximumAge: ClosedRange<Duration> = .seconds(20 * 60) ... .seconds(60 * 60)
    public static let expiryRenewalSpacing: Duration = .seconds(60)

    public let teamID: String
    public let keyID: String
    public let maximumAge: Duration
    private let key: P256.Signing.PrivateKey
    public private(set) var current: ProviderToken?
    /// When `current` was signed, untruncated: ages are measured from here so that the whole
    /// seconds of `iat` never shorten the 20-minute spacing.
    private var signedAt: Date?
    /// When a token was last signed because Apple called the current one expired.
    private var lastExpiryRenewalAt: Date?
    /// How many tokens were signed so far.
    public private(set) var renewals: Int = 0

    /// `maximumAge` is clamped into `allowedMaximumAge`.
    public init(teamID: String, keyID: String, key: P256.Signing.PrivateKey, maximumAge: Duration = defaultMaximumAge) {
        self.teamID = teamID
        self.keyID = keyID
        self.key = key
        self.maximumAge = min(max(maximumAge, Self.allowedMaximumAge.lowerBound), Self.allowedMaximumAge.upperBound)
    }

    /// The token to send a request with at `now`; `renewed` is true when it was just signed.
    public mutating func token(now: Date) throws -> (token: ProviderToken, renewed: Bool) {
        if let current, age(now: now) < maximumAge {
            return (current, false)
        }
        return (try renew(now: now), true)
    }

    /// Apple answered `ExpiredProviderToken` for a request signed with `rejected`; returns the
    /// token to retry with (see the type's documentation for when it is a new one).
    public mutating func expiredTokenReported(
        _ rejected: ProviderToken, now: Date
    ) throws -> (token: ProviderToken, renewed: Bool) {
        guard let current else { return (try renew(now: now), true) }
        if current != rejected { return (current, false) }
        if let last = lastExpiryRenewalAt, Duration.seconds(now.timeIntervalSince(last)) < Self.expiryRenewalSpacing {
            return (current, false)
        }
        lastExpiryRenewalAt = now
        return (try renew(now: now), true)
    }

    private func age(now: Date) -> Duration {
        guard let signedAt else { return .seconds(Int64.max) }
        return .seconds(now.timeIntervalSince(signedAt))
    }

    private mutating func renew(now: Date) throws -> ProviderToken {
        let token = try ProviderToken.sign(teamID: teamID, keyID: keyID, key: key, issuedAt: now)
        current = token
        signedAt = now
        renewals += 1
        return token
    }
}
