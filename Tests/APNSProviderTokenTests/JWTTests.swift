/// Provider tokens: the JWT's parts and signature, and the renewal policy over driven time.
import APNSProviderToken
import Crypto
import Foundation
import Testing

@Suite struct ProviderTokenTests {
    let key = P256.Signing.PrivateKey()

    private func json(_ part: Substring) throws -> [String: Any] {
        let data = try #require(ProviderToken.decodeBase64URL(String(part)))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test func headerAndClaimsDecode() throws {
        let issued = Date(timeIntervalSince1970: 1_700_000_000.75)
        let token = try ProviderToken.sign(teamID: "ABCDE12345", keyID: "KEY1234567", key: key, issuedAt: issued)
        let parts = token.jwt.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3)
        let header = try json(parts[0])
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "KEY1234567")
        #expect(header.count == 2)
        let claims = try json(parts[1])
        #expect(claims["iss"] as? String == "ABCDE12345")
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_700_000_000)
        #expect(token.issuedAt == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(token.authorization == "bearer " + token.jwt)
        // base64url: no padding, no '+' or '/'.
        #expect(!token.jwt.contains("=") && !token.jwt.contains("+") && !token.jwt.contains("/"))
    }

    @Test func signatureIsRawES256AndVerifiesWithThePublicKey() throws {
        let token = try ProviderToken.sign(teamID: "T", keyID: "K", key: key, issuedAt: Date())
        let parts = token.jwt.split(separator: ".")
        let signature = try #require(ProviderToken.decodeBase64URL(String(parts[2])))
        #expect(signature.count == 64)
        let ecdsa = try P256.Signing.ECDSASignature(rawRepresentation: signature)
        let signingInput = Data("\(parts[0]).\(parts[1])".utf8)
        #expect(key.publicKey.isValidSignature(ecdsa, for: signingInput))
        #expect(!P256.Signing.PrivateKey().publicKey.isValidSignature(ecdsa, for: signingInput))
        #expect(!key.publicKey.isValidSignature(ecdsa, for: Data("tampered".utf8)))
    }

    @Test func base64URLRoundTrips() throws {
        for length in 0..<40 {
            let data = Data((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 251) })
            #expect(ProviderToken.decodeBase64URL(ProviderToken.base64URL(data)) == data)
        }
    }
}

@Suite struct ProviderTokenManagerTests {
    let t0 = Date(timeIntervalSince1970: 1_700_000_000)
    func minutes(_ m: Double) -> Date { t0.addingTimeInterval(m * 60) }
    func manager(maximumAge: Duration = ProviderTokenManager.defaultMaximumAge) -> ProviderTokenManager {
        ProviderTokenManager(teamID: "TEAM", keyID: "KID", key: P256.Signing.PrivateKey(), maximumAge: maximumAge)
    }

    @Test func reusesTheTokenUntilItsMaximumAge() throws {
        var m = manager()
        let first = try m.token(now: t0)
        #expect(first.renewed)
        #expect(try m.token(now: minutes(10)).token == first.token)
        #expect(try m.token(now: minutes(49.9)).token == first.token)
        let second = try m.token(now: minutes(50))
        #expect(second.renewed && second.token != first.token)
        #expect(second.token.issuedAt == minutes(50))
        #expect(m.renewals == 2)
    }

    @Test func maximumAgeIsClampedTo20To60Minutes() {
        #expect(manager(maximumAge: .seconds(60)).maximumAge == .seconds(20 * 60))
        #expect(manager(maximumAge: .seconds(3 * 3600)).maximumAge == .seconds(60 * 60))
        #expect(manager(maximumAge: .seconds(30 * 60)).maximumAge == .seconds(30 * 60))
    }

    @Test func expiredTokenRenewsOnceWhenOldEnough() throws {
        var m = manager()
        let first = try m.token(now: t0).token
        let renewed = try m.expiredTokenReported(first, now: minutes(25))
        #expect(renewed.renewed && renewed.token != first)
        // Every connection that still had the old token in flight reports it too: no new token.
        let again = try m.expiredTokenReported(first, now: minutes(25.1))
        #expect(!again.renewed && again.token == renewed.token)
        #expect(m.renewals == 2)
    }

    /// Apple calling a young token expired means the clocks disagree or the key changed on
    /// Apple's side: the token is renewed at once, not resent until it is 20 minutes old.
    @Test func expiredTokenRenewsAtOnceWhateverItsAge() throws {
        var m = manager()
        let first = try m.token(now: t0).token
        let renewed = try m.expiredTokenReported(first, now: minutes(0.5))
        #expect(renewed.renewed && renewed.token != first)
        #expect(renewed.token.issuedAt == minutes(0.5))
        // The routine schedule starts again from the renewed token.
        #expect(try m.token(now: minutes(49)).token == renewed.token)
    }

    /// A renewed token refused as well (the bundle is then held and probed): renewals for
    /// ExpiredProviderToken are spaced, so probes cannot sign a token every few seconds.
    @Test func expiryRenewalsAreSpaced() throws {
        var m = manager()
        var current = try m.token(now: t0).token
        var signedAt: [Double] = []
        for second in stride(from: 1.0, through: 300.0, by: 5.0) {
            let answer = try m.expiredTokenReported(current, now: t0.addingTimeInterval(second))
            if answer.renewed { signedAt.append(second) }
            current = answer.token
        }
        #expect(signedAt == [1, 61, 121, 181, 241])
        #expect(m.renewals == 6)
    }

    /// Whatever mix of requests and answers about tokens already replaced arrives, no two tokens
    /// are signed less than 20 minutes apart on the routine schedule: the condition for
    /// TooManyProviderTokenUpdates. (Only Apple calling the current token expired renews sooner.)
    @Test func renewalsAreAlwaysAtLeastTwentyMinutesApart() throws {
        var m = manager(maximumAge: .seconds(20 * 60))
        var signedAt: [Date] = []
        var generator = SystemRandomNumberGenerator()
        var now = t0
        var current: ProviderToken?
        var previous: ProviderToken?
        for _ in 0..<5000 {
            now = now.addingTimeInterval(Double(generator.next() % 30))
            let result: (token: ProviderToken, renewed: Bool)
            if generator.next() % 3 == 0, let stale = previous {
                result = try m.expiredTokenReported(stale, now: now)
            } else {
                result = try m.token(now: now)
            }
            if result.renewed {
                signedAt.append(now)
                previous = current
            }
            current = result.token
        }
        #expect(signedAt.count > 3)
        for (a, b) in zip(signedAt, signedAt.dropFirst()) {
            #expect(b.timeIntervalSince(a) >= 20 * 60)
        }
    }
}

extension ProviderToken {
    /// The inverse of `base64URL`, to read a token back; nil for invalid input.
    static func decodeBase64URL(_ string: String) -> Data? {
        var s = string.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s.append("=") }
        return Data(base64Encoded: s)
    }
}
