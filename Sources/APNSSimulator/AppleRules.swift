/// Apple's documented rules for notification requests, stated by the simulator on its own.
///
/// The simulator is the other side of every transport test, so it must not borrow the product's
/// tables (`PushType`, `JobParser.payloadLimit`): a wrong rule there would pass on both sides.
/// Source: "Sending notification requests to APNs" (the `apns-push-type` header, the topic
/// suffixes each type requires, the payload size limits).
enum AppleRules {
    /// One documented `apns-push-type` value.
    struct PushType: Sendable, Hashable {
        /// The header value.
        var name: String
        /// What the topic must end with: the bundle ID plus this.
        var topicSuffix: String
        /// The largest payload in bytes.
        var maximumPayloadBytes: Int
    }

    static let alert = PushType(name: "alert", topicSuffix: "", maximumPayloadBytes: 4096)
    static let background = PushType(name: "background", topicSuffix: "", maximumPayloadBytes: 4096)

    /// Every push type Apple documents for the HTTP/2 provider API.
    static let pushTypes: [PushType] = [
        alert, background,
        PushType(name: "location", topicSuffix: ".location-query", maximumPayloadBytes: 4096),
        PushType(name: "voip", topicSuffix: ".voip", maximumPayloadBytes: 5120),
        PushType(name: "complication", topicSuffix: ".complication", maximumPayloadBytes: 4096),
        PushType(name: "fileprovider", topicSuffix: ".pushkit.fileprovider", maximumPayloadBytes: 4096),
        PushType(name: "mdm", topicSuffix: "", maximumPayloadBytes: 4096),
        PushType(name: "liveactivity", topicSuffix: ".push-type.liveactivity", maximumPayloadBytes: 4096),
        PushType(name: "pushtotalk", topicSuffix: ".voip-ptt", maximumPayloadBytes: 4096),
        PushType(name: "widgets", topicSuffix: ".push-type.widgets", maximumPayloadBytes: 4096),
        PushType(name: "controls", topicSuffix: ".push-type.controls", maximumPayloadBytes: 4096),
    ]

    static func pushType(named name: String) -> PushType? {
        pushTypes.first { $0.name == name }
    }
}
