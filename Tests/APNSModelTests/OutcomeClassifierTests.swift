import APNSBinaryProtocol
import APNSModel
import APNSOutcome
import Testing

/// Every HTTP status class, every documented APNs reason, every transport failure and every
/// binary status code maps to the outcome of contract §4.
@Suite struct OutcomeClassifierTests {
    static let timestamp: Int64 = 1_700_000_000_123

    /// Each documented reason at the status Apple sends it with.
    static let reasonTable: [(APNSReason, Int, Outcome)] = [
        (.badCollapseId, 400, .dead(reason: "BadCollapseId", status: 400, detail: "APNs answered 400 BadCollapseId: the collapse identifier exceeds the maximum allowed size")),
        (.badDeviceToken, 400, .invalidToken(reason: "BadDeviceToken", timestamp: nil)),
        (.badExpirationDate, 400, .dead(reason: "BadExpirationDate", status: 400, detail: "APNs answered 400 BadExpirationDate: the apns-expiration value is invalid")),
        (.badMessageId, 400, .dead(reason: "BadMessageId", status: 400, detail: "APNs answered 400 BadMessageId: the apns-id value is invalid")),
        (.badPriority, 400, .dead(reason: "BadPriority", status: 400, detail: "APNs answered 400 BadPriority: the apns-priority value is invalid")),
        (.badTopic, 400, .held(reason: "BadTopic", status: 400)),
        (.deviceTokenNotForTopic, 400, .invalidToken(reason: "DeviceTokenNotForTopic", timestamp: nil)),
        (.duplicateHeaders, 400, .held(reason: "DuplicateHeaders", status: 400)),
        (.idleTimeout, 400, .retry(reason: "IdleTimeout", status: 400)),
        (.invalidPushType, 400, .dead(reason: "InvalidPushType", status: 400, detail: "APNs answered 400 InvalidPushType: the apns-push-type value is invalid")),
        (.missingDeviceToken, 400, .dead(reason: "MissingDeviceToken", status: 400, detail: "APNs answered 400 MissingDeviceToken: the device token is not in the request path")),
        (.missingTopic, 400, .held(reason: "MissingTopic", status: 400)),
        (.payloadEmpty, 400, .dead(reason: "PayloadEmpty", status: 400, detail: "APNs answered 400 PayloadEmpty: the message payload is empty")),
        (.topicDisallowed, 400, .held(reason: "TopicDisallowed", status: 400)),
        (.badCertificate, 403, .held(reason: "BadCertificate", status: 403)),
        (.badCertificateEnvironment, 403, .held(reason: "BadCertificateEnvironment", status: 403)),
        (.expiredProviderToken, 403, .held(reason: "ExpiredProviderToken", status: 403)),
        (.forbidden, 403, .held(reason: "Forbidden", status: 403)),
        (.invalidProviderToken, 403, .held(reason: "InvalidProviderToken", status: 403)),
        (.missingProviderToken, 403, .held(reason: "MissingProviderToken", status: 403)),
        (.unrelatedKeyIdInToken, 403, .held(reason: "UnrelatedKeyIdInToken", status: 403)),
        (.badEnvironmentKeyInToken, 403, .held(reason: "BadEnvironmentKeyInToken", status: 403)),
        (.badPath, 404, .held(reason: "BadPath", status: 404)),
        (.methodNotAllowed, 405, .held(reason: "MethodNotAllowed", status: 405)),
        (.badChannelId, 400, .invalidToken(reason: "BadChannelId", timestamp: nil)),
        (.missingChannelId, 400, .invalidToken(reason: "MissingChannelId", timestamp: nil)),
        (.channelNotRegistered, 404, .invalidToken(reason: "ChannelNotRegistered", timestamp: nil)),
        (.cannotCreateChannelConfig, 400, .dead(reason: "CannotCreateChannelConfig", status: 400, detail: "APNs answered 400 CannotCreateChannelConfig: the bundle has reached its maximum number of channels")),
        (.missingPushType, 400, .held(reason: "MissingPushType", status: 400)),
        (.featureNotEnabled, 400, .held(reason: "FeatureNotEnabled", status: 400)),
        (.expiredToken, 410, .invalidToken(reason: "ExpiredToken", timestamp: timestamp)),
        (.unregistered, 410, .invalidToken(reason: "Unregistered", timestamp: timestamp)),
        (.payloadTooLarge, 413, .dead(reason: "PayloadTooLarge", status: 413, detail: "APNs answered 413 PayloadTooLarge: the message payload is too large")),
        (.tooManyProviderTokenUpdates, 429, .held(reason: "TooManyProviderTokenUpdates", status: 429)),
        (.tooManyRequests, 429, .retry(reason: "TooManyRequests", status: 429)),
        (.internalServerError, 500, .retry(reason: "InternalServerError", status: 500)),
        (.serviceUnavailable, 503, .retry(reason: "ServiceUnavailable", status: 503)),
        (.shutdown, 503, .retry(reason: "Shutdown", status: 503)),
    ]

    @Test func reasonTableCoversEveryDocumentedReason() {
        #expect(Self.reasonTable.map(\.0) == APNSReason.documented)
    }

    @Test(arguments: reasonTable)
    func documentedReason(_ reason: APNSReason, _ status: Int, _ expected: Outcome) {
        // Apple sends a timestamp only with 410; pass it where Apple would.
        let answer = HTTPAnswer(status: status, reason: reason, timestamp: status == 410 ? Self.timestamp : nil)
        #expect(OutcomeClassifier.classify(.http(answer)) == expected)
    }

    @Test func reasonDecidesEvenOnAnUnexpectedStatus() {
        let answer = HTTPAnswer(status: 400, reason: .expiredProviderToken)
        #expect(OutcomeClassifier.classify(.http(answer)) == .held(reason: "ExpiredProviderToken", status: 400))
        let bad = HTTPAnswer(status: 400, reason: .badDeviceToken, timestamp: 5)
        #expect(OutcomeClassifier.classify(.http(bad)) == .invalidToken(reason: "BadDeviceToken", timestamp: 5))
    }

    /// Statuses without a reason, or with one Apple added after this code.
    static let statusTable: [(Int, String?, Outcome)] = [
        (200, nil, .delivered),
        (200, "Whatever", .delivered),
        (204, nil, .delivered),
        (400, nil, .dead(reason: "HTTP400", status: 400, detail: "APNs answered 400 HTTP400")),
        (400, "BrandNewReason", .dead(reason: "BrandNewReason", status: 400, detail: "APNs answered 400 BrandNewReason")),
        (401, nil, .held(reason: "HTTP401", status: 401)),
        (403, nil, .held(reason: "HTTP403", status: 403)),
        (403, "NewAuthProblem", .held(reason: "NewAuthProblem", status: 403)),
        (404, nil, .held(reason: "HTTP404", status: 404)),
        (405, nil, .held(reason: "HTTP405", status: 405)),
        (410, nil, .invalidToken(reason: "Unregistered", timestamp: timestamp)),
        (410, "TokenGoneForNewReason", .invalidToken(reason: "TokenGoneForNewReason", timestamp: timestamp)),
        (413, nil, .dead(reason: "HTTP413", status: 413, detail: "APNs answered 413 HTTP413")),
        (418, nil, .dead(reason: "HTTP418", status: 418, detail: "APNs answered 418 HTTP418")),
        (429, nil, .retry(reason: "HTTP429", status: 429)),
        (429, "SlowDown", .retry(reason: "SlowDown", status: 429)),
        (500, nil, .retry(reason: "HTTP500", status: 500)),
        (502, nil, .retry(reason: "HTTP502", status: 502)),
        (503, nil, .retry(reason: "HTTP503", status: 503)),
        (503, "NewOutage", .retry(reason: "NewOutage", status: 503)),
        (504, nil, .retry(reason: "HTTP504", status: 504)),
        (599, nil, .retry(reason: "HTTP599", status: 599)),
        (302, nil, .retry(reason: "HTTP302", status: 302)),
        (100, nil, .retry(reason: "HTTP100", status: 100)),
    ]

    @Test(arguments: statusTable)
    func statusWithoutAKnownReason(_ status: Int, _ reason: String?, _ expected: Outcome) {
        let answer = HTTPAnswer(status: status, reason: reason.map(APNSReason.init(rawValue:)), timestamp: status == 410 ? Self.timestamp : nil)
        #expect(OutcomeClassifier.classify(.http(answer)) == expected)
    }

    static let failures: [TransportFailure] = [
        .connectionLost("reset by peer"), .streamReset(2), .timeout, .goaway, .connectFailed("refused"), .shutdown,
    ]

    @Test(arguments: failures)
    func everyTransportFailureIsRetried(_ failure: TransportFailure) {
        #expect(OutcomeClassifier.classify(.failed(failure)) == .retry(reason: failure.name, status: 0))
    }

    @Test func binaryAcceptedIsDelivered() {
        #expect(OutcomeClassifier.classify(.binaryAccepted) == .delivered)
    }

    static let binaryTable: [(UInt8, Outcome)] = [
        (0, .delivered),
        (1, .retry(reason: "ProcessingError", status: 1)),
        (2, .dead(reason: "MissingDeviceToken", status: 2, detail: "APNs binary status 2 (MissingDeviceToken)")),
        (3, .dead(reason: "MissingTopic", status: 3, detail: "APNs binary status 3 (MissingTopic)")),
        (4, .dead(reason: "MissingPayload", status: 4, detail: "APNs binary status 4 (MissingPayload)")),
        (5, .dead(reason: "InvalidTokenSize", status: 5, detail: "APNs binary status 5 (InvalidTokenSize)")),
        (6, .dead(reason: "InvalidTopicSize", status: 6, detail: "APNs binary status 6 (InvalidTopicSize)")),
        (7, .dead(reason: "InvalidPayloadSize", status: 7, detail: "APNs binary status 7 (InvalidPayloadSize)")),
        (8, .invalidToken(reason: "InvalidToken", timestamp: nil)),
        (10, .retry(reason: "Shutdown", status: 10)),
        (128, .dead(reason: "ProtocolError", status: 128, detail: "APNs binary status 128 (ProtocolError)")),
        (255, .retry(reason: "Unknown", status: 255)),
    ]

    @Test func binaryTableCoversEveryDocumentedStatus() {
        #expect(Self.binaryTable.map { BinaryStatus(rawValue: $0.0) } == BinaryStatus.documented)
    }

    @Test(arguments: binaryTable)
    func binaryStatus(_ code: UInt8, _ expected: Outcome) {
        #expect(OutcomeClassifier.classify(.binaryRejected(status: code)) == expected)
    }

    @Test func undefinedBinaryStatusesAreRetried() {
        let documented = Set(BinaryStatus.documented.map(\.rawValue))
        for code in UInt8.min...UInt8.max where !documented.contains(code) {
            #expect(OutcomeClassifier.classify(.binaryRejected(status: code)) == .retry(reason: "Status\(code)", status: Int(code)))
        }
    }

    @Test func everyReasonHasAnExplanation() {
        for reason in APNSReason.documented {
            #expect(!reason.explanation.isEmpty)
            #expect(!reason.explanation.contains("not known"))
        }
        #expect(APNSReason.unknown("X").explanation.contains("X"))
    }
}
