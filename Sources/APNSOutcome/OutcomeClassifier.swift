import APNSBinaryProtocol
import APNSModel

/// Maps what a transport learned about a notification to where the job ends (contract §4).
///
/// HTTP/2, in this order:
/// 1. any 2xx → delivered (Apple only sends 200; a 2xx from anything else still means accepted);
/// 2. a documented Apple reason decides by itself, whatever the status (the reason is the more
///    specific signal; see `outcome(for:)` below for the table);
/// 3. no reason, or one Apple added after this code: 410 → invalid token; 401, 403, 404, 405 →
///    held; 429 → retry; other 4xx → dead; 5xx and anything else → retry.
///
/// Decisions where the contract leaves room:
/// - `TooManyProviderTokenUpdates` → held. It is the provider's fault (tokens renewed too often),
///   never the job's, and the limit lapses by itself: holding pauses the bundle, logs once and
///   resumes when a probe succeeds, where retrying would burn every job's attempts meanwhile.
/// - `MissingTopic`, `DuplicateHeaders`, `BadPath` (404), `MethodNotAllowed` (405) → held. The
///   worker always sends a topic, unique headers and `POST /3/device/<hex>`, so these mean a
///   broken transport or an endpoint that is not APNs: every job would fail the same way and
///   none of them is at fault (the contract dead-letters only what "the job itself causes").
/// - `IdleTimeout` → retry: the connection was idle, the notification was fine.
/// - `Forbidden`, `UnrelatedKeyIdInToken`, `BadEnvironmentKeyInToken` → held: credentials.
/// - `ExpiredProviderToken` → held. The HTTP/2 transport renews the token and sends once more
///   by itself; an answer that still reaches here means the renewed token was refused as well
///   (a skewed clock, a revoked key): contract §4 holds the bundle, never a requeue loop.
/// - Broadcasts (contract §7): `ChannelNotRegistered`, `BadChannelId`, `MissingChannelId` end the
///   job like an invalid token (the router names the channel in the feedback event);
///   `FeatureNotEnabled` (broadcast not enabled for the key or bundle) and `MissingPushType` (the
///   worker always sends one) → held; `CannotCreateChannelConfig` (channel limit, a management
///   answer) → dead if it ever answers a broadcast.
/// - A 410 with any reason → invalid token (410 only ever means the token is gone), reason
///   `Unregistered` when Apple gave none.
///
/// Binary provider API: 0 → delivered (no error for this frame); 8 → invalid token
/// (`InvalidToken`); 1, 10, 255 and codes Apple never defined → retry; 2 to 7 and 128 → dead.
/// Note on 10 (shutdown): Apple names the *last notification it processed*, so a transport
/// should report `binaryAccepted` for that frame and resend the later ones; a `binaryRejected(10)`
/// that still reaches here is retried.
public enum OutcomeClassifier {
    public static func classify(_ result: TransportResult) -> Outcome {
        switch result {
        case .http(let answer):
            return classify(answer)
        case .binaryAccepted:
            return .delivered
        case .binaryRejected(let code):
            return classify(binaryStatus: BinaryStatus(rawValue: code))
        case .failed(let failure):
            return .retry(reason: failure.name, status: 0)
        }
    }

    public static func classify(_ answer: HTTPAnswer) -> Outcome {
        let status = answer.status
        if (200...299).contains(status) { return .delivered }
        if let reason = answer.reason, let byReason = outcome(for: reason, answer: answer) {
            return byReason
        }
        let reasonText = answer.reason?.rawValue ?? "HTTP\(status)"
        switch status {
        case 410:
            return .invalidToken(reason: answer.reason?.rawValue ?? APNSReason.unregistered.rawValue, timestamp: answer.timestamp)
        case 401, 403, 404, 405:
            return .held(reason: reasonText, status: status)
        case 429:
            return .retry(reason: reasonText, status: status)
        case 400...499:
            return .dead(reason: reasonText, status: status, detail: "APNs answered \(status) \(reasonText)")
        default:
            return .retry(reason: reasonText, status: status)
        }
    }

    /// The outcome a documented reason implies on its own; nil for `.unknown`.
    static func outcome(for reason: APNSReason, answer: HTTPAnswer) -> Outcome? {
        let status = answer.status
        let name = reason.rawValue
        switch reason {
        case .badDeviceToken, .deviceTokenNotForTopic, .expiredToken, .unregistered,
            .channelNotRegistered, .badChannelId, .missingChannelId:
            return .invalidToken(reason: name, timestamp: answer.timestamp)
        case .cannotCreateChannelConfig, .badCollapseId, .badExpirationDate, .badMessageId, .badPriority, .invalidPushType,
            .missingDeviceToken, .payloadEmpty, .payloadTooLarge:
            return .dead(reason: name, status: status, detail: "APNs answered \(status) \(name): \(reason.explanation)")
        case .badTopic, .topicDisallowed, .missingTopic, .duplicateHeaders, .badPath, .methodNotAllowed,
            .badCertificate, .badCertificateEnvironment, .forbidden, .invalidProviderToken,
            .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyInToken,
            .tooManyProviderTokenUpdates, .expiredProviderToken, .featureNotEnabled, .missingPushType:
            return .held(reason: name, status: status)
        case .idleTimeout, .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown:
            return .retry(reason: name, status: status)
        case .unknown:
            return nil
        }
    }

    public static func classify(binaryStatus status: BinaryStatus) -> Outcome {
        let code = Int(status.rawValue)
        switch status {
        case .noErrors:
            return .delivered
        case .invalidToken:
            return .invalidToken(reason: "InvalidToken", timestamp: nil)
        case .missingDeviceToken, .missingTopic, .missingPayload, .invalidTokenSize, .invalidTopicSize,
            .invalidPayloadSize, .protocolError:
            return .dead(reason: status.name, status: code, detail: "APNs binary status \(code) (\(status.name))")
        default:
            // processingError, shutdown, unknown, and any code Apple never defined: not the job's
            // fault as far as we can tell, so try again; retries are bounded.
            return .retry(reason: status.name, status: code)
        }
    }
}

extension APNSReason {
    /// Apple's one-line meaning of the reason, for dead-letter `x-apns-error` lines.
    public var explanation: String {
        switch self {
        case .badCollapseId: return "the collapse identifier exceeds the maximum allowed size"
        case .badDeviceToken: return "the device token is invalid"
        case .badExpirationDate: return "the apns-expiration value is invalid"
        case .badMessageId: return "the apns-id value is invalid"
        case .badPriority: return "the apns-priority value is invalid"
        case .badTopic: return "the apns-topic value is invalid"
        case .deviceTokenNotForTopic: return "the device token does not match the topic"
        case .duplicateHeaders: return "one or more headers are repeated"
        case .idleTimeout: return "idle timeout"
        case .invalidPushType: return "the apns-push-type value is invalid"
        case .missingDeviceToken: return "the device token is not in the request path"
        case .missingTopic: return "the apns-topic header is missing and required"
        case .payloadEmpty: return "the message payload is empty"
        case .topicDisallowed: return "pushing to this topic is not allowed"
        case .badCertificate: return "the certificate is invalid"
        case .badCertificateEnvironment: return "the client certificate is for the wrong environment"
        case .expiredProviderToken: return "the provider token is stale and a new one must be generated"
        case .forbidden: return "the specified action is not allowed"
        case .invalidProviderToken: return "the provider token is not valid or its signature cannot be verified"
        case .missingProviderToken: return "no provider certificate was used and no authorization header was sent"
        case .unrelatedKeyIdInToken: return "the key ID in the provider token is unrelated to this connection"
        case .badEnvironmentKeyInToken: return "the key ID in the provider token is for the wrong environment"
        case .badPath: return "the request path is invalid"
        case .methodNotAllowed: return "the method is not allowed"
        case .badChannelId: return "the apns-channel-id value is invalid"
        case .missingChannelId: return "the apns-channel-id header is missing"
        case .channelNotRegistered: return "the channel does not exist"
        case .cannotCreateChannelConfig: return "the bundle has reached its maximum number of channels"
        case .missingPushType: return "the apns-push-type header is missing"
        case .featureNotEnabled: return "broadcast push is not enabled for this key or bundle"
        case .expiredToken: return "the device token has expired"
        case .unregistered: return "the device token is inactive for the topic"
        case .payloadTooLarge: return "the message payload is too large"
        case .tooManyProviderTokenUpdates: return "the provider token is being updated too often"
        case .tooManyRequests: return "too many requests to the same device token"
        case .internalServerError: return "internal server error"
        case .serviceUnavailable: return "the service is unavailable"
        case .shutdown: return "the APNs server is shutting down"
        case .unknown(let raw): return "reason \(raw) is not known to this version"
        }
    }
}
