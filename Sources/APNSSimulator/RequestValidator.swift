/// Apple's request validation, without IO: the route, the provider token, the `apns-*` headers
/// and the payload of one HTTP/2 request, each failure mapped to the status and reason Apple
/// answers. The order of the checks follows Apple's: route, then authentication, then headers,
/// then payload, so a request with several faults gets the reason of the first one.
///
/// Decisions where Apple's documentation leaves room:
/// - `apns-topic` is required even when only one topic would be possible (`MissingTopic`).
/// - A topic with characters no bundle ID can contain is `BadTopic`; a well-formed topic that is
///   not one of the configured bundle IDs (with its push type's suffix) is `TopicDisallowed`.
/// - A push type whose topic suffix does not match `apns-topic` is `InvalidPushType`. A missing
///   `apns-push-type` is taken from the topic's suffix (`alert` for a bare bundle ID).
/// - `background` with an explicit `apns-priority: 10` is `BadPriority` (Apple: background
///   notifications must use 5); without the header a background push counts as priority 5.
/// - A device token must be even-length hexadecimal of 1 to 100 bytes (Apple's tokens are 32
///   today and Apple warns they may grow), else `BadDeviceToken`.
/// - A payload that is not a JSON object is 400 `BadPayload`: Apple's table has no reason for it,
///   and the outcome classifier treats any unknown 400 as a job fault (dead letter).
import APNSModel
import Crypto
import Foundation

/// One HTTP/2 request as the stream handler read it: pseudo-headers apart, regular headers in
/// order with lower-case names and duplicates kept.
struct SimulatorRequest: Sendable {
    var method: String?
    var path: String?
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    /// The body was longer than the handler keeps; only `bodyLength` is known exactly.
    var bodyLength: Int
}

/// A refusal: the status and reason Apple would answer.
struct Rejection: Error, Sendable, Hashable {
    var status: Int
    var reason: APNSReason

    init(_ status: Int, _ reason: APNSReason) {
        self.status = status
        self.reason = reason
    }

    static let badPayload = APNSReason.unknown("BadPayload")
}

/// What a request whose route is valid is for.
struct ValidatedRoute: Sendable {
    enum Target: Sendable {
        /// `POST /3/device/<token>`; lower-case hexadecimal.
        case device(tokenHex: String)
        /// `POST /4/broadcasts/apps/<bundle>` (Apple's broadcast request).
        case broadcast(bundleID: String)
    }

    var target: Target

    /// The device token, lower-case hexadecimal; nil for a broadcast.
    var tokenHex: String? {
        if case .device(let hex) = target { return hex }
        return nil
    }
}

/// How a request proved who sent it.
enum RequestCredential: Sendable, Hashable {
    /// A provider token that verified; `jwt` is the token text, for the per-connection checks.
    case token(jwt: String, keyID: String, teamID: String, issuedAt: Int64)
    case certificate
}

/// A request that passed every check.
struct ValidatedNotification: Sendable {
    var tokenHex: String
    var topic: String
    var pushType: AppleRules.PushType
    var priority: Int
    var apnsID: String?
    var expiration: Int?
    var collapseID: String?
}

struct RequestValidator: Sendable {
    var bundleIDs: Set<String>
    var tokenKeys: [String: SimulatorTokenKey]
    var providerTokenLifetime: Duration
    /// The environment this simulator is, for keys limited to one (`AppleKeyRules.swift`).
    var environment: APNSEnvironment
    /// Bundle ID → the team that owns it.
    var bundleTeams: [String: String]

    init(configuration: SimulatorConfiguration) {
        self.bundleIDs = Set(configuration.bundleIDs)
        self.environment = configuration.environment
        self.bundleTeams = configuration.bundleTeams
        var keys: [String: SimulatorTokenKey] = [:]
        for key in configuration.tokenKeys { keys[key.keyID] = key }
        self.tokenKeys = keys
        self.providerTokenLifetime = configuration.providerTokenLifetime
    }

    static let maximumTokenBytes = 100
    static let maximumCollapseIDBytes = 64

    // MARK: Route

    /// Duplicate headers, method, path and device token.
    func validateRoute(_ request: SimulatorRequest) -> Result<ValidatedRoute, Rejection> {
        var seen = Set<String>()
        for header in request.headers where !seen.insert(header.name).inserted {
            return .failure(Rejection(400, .duplicateHeaders))
        }
        guard request.method == "POST" else { return .failure(Rejection(405, .methodNotAllowed)) }
        guard var path = request.path else { return .failure(Rejection(404, .badPath)) }
        if let query = path.firstIndex(of: "?") { path = String(path[..<query]) }
        if let bundle = Self.broadcastBundle(path: path) { return bundle }
        let prefix = "/3/device"
        guard path.hasPrefix(prefix) else { return .failure(Rejection(404, .badPath)) }
        let rest = path.dropFirst(prefix.count)
        if rest.isEmpty || rest == "/" { return .failure(Rejection(400, .missingDeviceToken)) }
        guard rest.first == "/" else { return .failure(Rejection(404, .badPath)) }
        let tokenText = rest.dropFirst()
        if tokenText.contains("/") { return .failure(Rejection(404, .badPath)) }
        guard let token = DeviceToken(hex: String(tokenText)), token.bytes.count <= Self.maximumTokenBytes else {
            return .failure(Rejection(400, .badDeviceToken))
        }
        return .success(ValidatedRoute(target: .device(tokenHex: token.hex)))
    }

    /// The route of Apple's broadcast request, `/4/broadcasts/apps/<bundle>`; nil for any other path.
    static func broadcastBundle(path: String) -> Result<ValidatedRoute, Rejection>? {
        let prefix = "/4/broadcasts/apps/"
        guard path.hasPrefix(prefix) else { return nil }
        let bundle = path.dropFirst(prefix.count)
        guard !bundle.isEmpty, !bundle.contains("/"), isWellFormedTopic(String(bundle)) else { return .failure(Rejection(404, .badPath)) }
        return .success(ValidatedRoute(target: .broadcast(bundleID: String(bundle))))
    }

    // MARK: Authentication

    /// The provider token when there is one, else the client certificate.
    func authenticate(_ request: SimulatorRequest, hasClientCertificate: Bool, now: Date) -> Result<RequestCredential, Rejection> {
        guard let authorization = request.headers.first(where: { $0.name == "authorization" })?.value else {
            return hasClientCertificate ? .success(.certificate) : .failure(Rejection(403, .missingProviderToken))
        }
        let parts = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            return .failure(Rejection(403, .invalidProviderToken))
        }
        return verifyProviderToken(String(parts[1]).trimmingCharacters(in: .whitespaces), now: now)
    }

    /// Verifies an ES256 provider token: header `alg`/`kid`, claims `iss`/`iat`, signature, age.
    func verifyProviderToken(_ jwt: String, now: Date) -> Result<RequestCredential, Rejection> {
        let invalid = Rejection(403, .invalidProviderToken)
        let segments = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3,
            let headerBytes = Base64URL.decode(segments[0]),
            let claimsBytes = Base64URL.decode(segments[1]),
            let signatureBytes = Base64URL.decode(segments[2]),
            let header = (try? JSONSerialization.jsonObject(with: Data(headerBytes))) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: Data(claimsBytes))) as? [String: Any]
        else { return .failure(invalid) }
        guard header["alg"] as? String == "ES256", let keyID = header["kid"] as? String, let key = tokenKeys[keyID] else {
            return .failure(invalid)
        }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes) else {
            return .failure(invalid)
        }
        let signingInput = jwt.utf8.prefix(segments[0].utf8.count + 1 + segments[1].utf8.count)
        guard key.publicKey.isValidSignature(signature, for: Array(signingInput)) else { return .failure(invalid) }
        guard claims["iss"] as? String == key.teamID, let issuedAt = Self.integer(claims["iat"]) else {
            return .failure(invalid)
        }
        if let keyEnvironment = key.environment, keyEnvironment != environment {
            return .failure(Rejection(403, .badEnvironmentKeyInToken))
        }
        let age = Int64(now.timeIntervalSince1970) - issuedAt
        if age > providerTokenLifetime.components.seconds { return .failure(Rejection(403, .expiredProviderToken)) }
        // A token from the future is one Apple cannot have issued a key for yet.
        if age < -providerTokenLifetime.components.seconds { return .failure(invalid) }
        return .success(.token(jwt: jwt, keyID: keyID, teamID: key.teamID, issuedAt: issuedAt))
    }

    /// Whether a token accepted earlier on the connection is still young enough.
    func isExpired(issuedAt: Int64, now: Date) -> Bool {
        Int64(now.timeIntervalSince1970) - issuedAt > providerTokenLifetime.components.seconds
    }

    private static func integer(_ value: Any?) -> Int64? {
        (value as? NSNumber)?.int64Value
    }

    // MARK: Headers and payload

    /// Everything after authentication: topic (and whether the token's key may sign for it),
    /// push type, priority, id, expiration, collapse id, payload.
    func validateNotification(
        _ request: SimulatorRequest, route: ValidatedRoute, credential: RequestCredential? = nil
    ) -> Result<ValidatedNotification, Rejection> {
        guard let tokenHex = route.tokenHex else { return .failure(Rejection(404, .badPath)) }
        func header(_ name: String) -> String? { request.headers.first(where: { $0.name == name })?.value }

        guard let topic = header("apns-topic"), !topic.isEmpty else { return .failure(Rejection(400, .missingTopic)) }
        guard Self.isWellFormedTopic(topic) else { return .failure(Rejection(400, .badTopic)) }

        let pushType: AppleRules.PushType
        if let raw = header("apns-push-type") {
            guard let parsed = AppleRules.pushType(named: raw) else { return .failure(Rejection(400, .invalidPushType)) }
            pushType = parsed
        } else {
            pushType = inferredPushType(topic: topic) ?? AppleRules.alert
        }
        let suffix = pushType.topicSuffix
        if !suffix.isEmpty, !topic.hasSuffix(suffix) {
            // The topic may still be a plain configured bundle: the push type is what is wrong.
            return .failure(Rejection(400, bundleIDs.contains(topic) ? .invalidPushType : .topicDisallowed))
        }
        let bundle = String(topic.dropLast(suffix.count))
        guard bundleIDs.contains(bundle) else {
            if suffix.isEmpty, inferredPushType(topic: topic) != nil {
                // e.g. `com.example.app.voip` with `apns-push-type: alert`.
                return .failure(Rejection(400, .invalidPushType))
            }
            return .failure(Rejection(400, .topicDisallowed))
        }
        if let rejection = keyRefusal(credential, topic: topic, bundle: bundle) { return .failure(rejection) }

        let priority: Int
        if let raw = header("apns-priority") {
            guard let value = Int(raw), [10, 5, 1].contains(value) else { return .failure(Rejection(400, .badPriority)) }
            if pushType == AppleRules.background, value == 10 { return .failure(Rejection(400, .badPriority)) }
            priority = value
        } else {
            priority = pushType == AppleRules.background ? 5 : 10
        }

        let apnsID = header("apns-id")
        if let apnsID, !Self.isCanonicalUUID(apnsID) { return .failure(Rejection(400, .badMessageId)) }

        var expiration: Int?
        if let raw = header("apns-expiration") {
            guard !raw.isEmpty, raw.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let value = Int(raw) else {
                return .failure(Rejection(400, .badExpirationDate))
            }
            expiration = value
        }

        let collapseID = header("apns-collapse-id")
        if let collapseID, collapseID.utf8.count > Self.maximumCollapseIDBytes {
            return .failure(Rejection(400, .badCollapseId))
        }

        if request.bodyLength == 0 { return .failure(Rejection(400, .payloadEmpty)) }
        if request.bodyLength > pushType.maximumPayloadBytes { return .failure(Rejection(413, .payloadTooLarge)) }
        guard (try? JSONSerialization.jsonObject(with: Data(request.body))) is [String: Any] else {
            return .failure(Rejection(400, Rejection.badPayload))
        }

        return .success(
            ValidatedNotification(
                tokenHex: tokenHex, topic: topic, pushType: pushType, priority: priority,
                apnsID: apnsID, expiration: expiration, collapseID: collapseID))
    }

    /// Whether the key of a provider token may sign for `topic` of `bundle`; nil when it may (and
    /// for certificates, whose topics the certificate names).
    func keyRefusal(_ credential: RequestCredential?, topic: String, bundle: String) -> Rejection? {
        guard case .token(_, let keyID, _, _)? = credential, let key = tokenKeys[keyID] else { return nil }
        return AppleRules.topicRefusal(key: key, topic: topic, bundle: bundle, owners: bundleTeams)
    }

    /// The push type whose suffix a topic carries, when it carries one of a configured bundle.
    private func inferredPushType(topic: String) -> AppleRules.PushType? {
        for type in AppleRules.pushTypes {
            let suffix = type.topicSuffix
            if !suffix.isEmpty, topic.hasSuffix(suffix), bundleIDs.contains(String(topic.dropLast(suffix.count))) {
                return type
            }
        }
        return nil
    }

    /// Letters, digits, `.`, `-` and `_`: what bundle IDs and Apple's suffixes are made of.
    static func isWellFormedTopic(_ topic: String) -> Bool {
        topic.utf8.allSatisfy { c in
            (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
                || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || c == UInt8(ascii: ".") || c == UInt8(ascii: "-")
                || c == UInt8(ascii: "_")
        }
    }

    /// `8-4-4-4-12` hexadecimal digits in either case, as Apple requires for `apns-id`.
    static func isCanonicalUUID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        for (index, c) in bytes.enumerated() {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                if c != UInt8(ascii: "-") { return false }
            } else if !((c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "f"))
                || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "F")))
            {
                return false
            }
        }
        return true
    }
}

/// base64url without padding (RFC 7515 §2), as JOSE uses it.
enum Base64URL {
    static func decode(_ text: Substring) -> [UInt8]? {
        var base64 = String(text).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        switch base64.utf8.count % 4 {
        case 0: break
        case 2: base64 += "=="
        case 3: base64 += "="
        default: return nil
        }
        return Data(base64Encoded: base64).map { Array($0) }
    }

    static func encode(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
