/// The simulator's answers to Apple's broadcast requests (on the provider API's port) and to
/// channel management requests (on the channel port), following "Sending broadcast push
/// notification requests to APNs" and "Sending channel management requests to APNs":
///
/// - broadcast `POST /4/broadcasts/apps/<bundle>`: `apns-channel-id` (missing: 400
///   `MissingChannelId`; not base64: 400 `BadChannelId`), `apns-push-type: liveactivity`
///   (missing: 400 `MissingPushType`; other: 400 `InvalidPushType`), `apns-priority`,
///   `apns-expiration`, `apns-request-id` (a UUID, else `BadMessageId`), payload at most 5120
///   bytes; an unknown or deleted channel is 404 `ChannelNotRegistered`; 200 names the request in
///   `apns-request-id`.
/// - management: `POST /1/apps/<bundle>/channels` with `{"message-storage-policy":0|1,
///   "push-type":"LiveActivity"}` → 201 with `apns-channel-id`; `GET` and `DELETE` on the same
///   path with `apns-channel-id` → 200 with the channel's JSON, 204; `GET
///   /1/apps/<bundle>/all-channels` → 200 `{"channels":[…]}`; the 10,001st channel of a bundle
///   is 400 `CannotCreateChannelConfig`.
///
/// Decisions where the documents leave room: a bundle the simulator does not serve, or one the
/// token's key may not sign for (`AppleKeyRules.swift`), is 400 `TopicDisallowed` on both services; a create body that is not JSON, or has a storage policy
/// other than 0 or 1, is 400 `BadMessageStoragePolicy` (no documented reason names it).
import APNSModel
import Foundation
import SeededRandom
import Synchronization

extension SimulatorEngine {
    static let badMessageStoragePolicy = APNSReason.unknown("BadMessageStoragePolicy")

    // MARK: Broadcast

    func decideBroadcast(
        _ request: SimulatorRequest, bundleID: String, faults: SimulatorFaults, raiseStreamLimit: Int?,
        credential: RequestCredential, now: Date
    ) -> StreamDecision {
        func header(_ name: String) -> String? { request.headers.first(where: { $0.name == name })?.value }
        let requestID = header("apns-request-id").flatMap { RequestValidator.isCanonicalUUID($0) ? $0 : nil } ?? UUID().uuidString
        func respond(_ response: SimulatorResponse) -> StreamDecision {
            var response = response
            response.idHeader = "apns-request-id"
            return .respond(response, delay: faults.latency, raiseStreamLimit: raiseStreamLimit)
        }
        func reject(_ status: Int, _ reason: APNSReason) -> StreamDecision { respond(answer(status, reason, apnsID: requestID)) }

        guard validator.bundleIDs.contains(bundleID) else { return reject(400, .topicDisallowed) }
        if let refusal = validator.keyRefusal(credential, topic: bundleID, bundle: bundleID) {
            return reject(refusal.status, refusal.reason)
        }
        guard let channelID = header("apns-channel-id") else { return reject(400, .missingChannelId) }
        guard AppleChannelRules.isWellFormedChannelID(channelID) else { return reject(400, .badChannelId) }
        guard let pushType = header("apns-push-type") else { return reject(400, .missingPushType) }
        guard pushType == AppleChannelRules.broadcastPushType else { return reject(400, .invalidPushType) }
        if let raw = header("apns-priority") {
            guard let value = Int(raw), [10, 5, 1].contains(value) else { return reject(400, .badPriority) }
        }
        if let raw = header("apns-request-id"), !RequestValidator.isCanonicalUUID(raw) { return reject(400, .badMessageId) }
        var expiration: Int?
        if let raw = header("apns-expiration") {
            guard !raw.isEmpty, raw.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let value = Int(raw) else {
                return reject(400, .badExpirationDate)
            }
            expiration = value
        }
        if request.bodyLength == 0 { return reject(400, .payloadEmpty) }
        if request.bodyLength > AppleChannelRules.maximumBroadcastPayloadBytes { return reject(413, .payloadTooLarge) }
        guard (try? JSONSerialization.jsonObject(with: Data(request.body))) is [String: Any] else {
            return reject(400, Rejection.badPayload)
        }

        let failure: (Int, APNSReason)? = state.withLock { s in
            let roll = Double(s.random.next() >> 11) / Double(1 << 53)
            if roll < faults.rate429 { return (429, .tooManyRequests) }
            if roll < faults.rate429 + faults.rate500 { return (500, .internalServerError) }
            if roll < faults.rate429 + faults.rate500 + faults.rate503 { return (503, .serviceUnavailable) }
            guard s.channels.received(channelID, bundleID: bundleID, payload: request.body) else { return (404, .channelNotRegistered) }
            s.counters.accepted += 1
            s.counters.broadcastsAccepted += 1
            let priority = header("apns-priority").flatMap { Int($0) } ?? 10
            self.keep(
                AcceptedNotification(
                    token: "", topic: bundleID, apnsID: requestID, pushType: pushType, priority: priority, expiration: expiration,
                    collapseID: nil, payload: request.body, authentication: credential.acceptedAuthentication, receivedAt: now,
                    channel: channelID),
                in: &s)
            return nil
        }
        if let (status, reason) = failure { return reject(status, reason) }
        return respond(SimulatorResponse(status: 200, apnsID: requestID))
    }

    // MARK: Channel management

    /// One request on the channel management port: route, authentication (the provider API's
    /// rules), then the operation on the channel book.
    func decideChannelManagement(_ request: SimulatorRequest, connection: ConnectionState, now: Date = Date()) -> StreamDecision {
        let faults = state.withLock { s -> SimulatorFaults in
            s.counters.channelRequests += 1
            return s.faults
        }
        func header(_ name: String) -> String? { request.headers.first(where: { $0.name == name })?.value }
        let requestID = header("apns-request-id").flatMap { RequestValidator.isCanonicalUUID($0) ? $0 : nil } ?? UUID().uuidString
        func respond(_ response: SimulatorResponse) -> StreamDecision {
            var response = response
            response.idHeader = "apns-request-id"
            return .respond(response, delay: faults.latency, raiseStreamLimit: nil)
        }
        func reject(_ status: Int, _ reason: APNSReason) -> StreamDecision { respond(answer(status, reason, apnsID: requestID)) }

        var seen = Set<String>()
        for field in request.headers where !seen.insert(field.name).inserted { return reject(400, .duplicateHeaders) }
        let operation: ChannelOperation
        switch ChannelOperation.route(method: request.method, path: request.path) {
        case .success(let value): operation = value
        case .failure(let rejection): return reject(rejection.status, rejection.reason)
        }
        if let reason = faults.rejectAllTokens { return reject(403, reason) }
        let credential: RequestCredential
        switch authenticate(request, connection: connection, now: now.addingTimeInterval(faults.clockSkew.timeInterval)) {
        case .failure(let rejection): return reject(rejection.status, rejection.reason)
        case .success(let (authenticated, _)): credential = authenticated
        }
        guard validator.bundleIDs.contains(operation.bundleID) else { return reject(400, .topicDisallowed) }
        // A channel's topic is its bundle: a topic-specific key that does not list it, or a key of
        // another team, is refused as a notification would be.
        if let refusal = validator.keyRefusal(credential, topic: operation.bundleID, bundle: operation.bundleID) {
            return reject(refusal.status, refusal.reason)
        }
        if let raw = header("apns-request-id"), !RequestValidator.isCanonicalUUID(raw) { return reject(400, .badMessageId) }

        func channelID() -> Result<String, Rejection> {
            guard let id = header("apns-channel-id") else { return .failure(Rejection(400, .missingChannelId)) }
            guard AppleChannelRules.isWellFormedChannelID(id) else { return .failure(Rejection(400, .badChannelId)) }
            return .success(id)
        }

        switch operation {
        case .create(let bundleID):
            let policy: Int
            switch Self.createBody(request.body) {
            case .success(let value): policy = value
            case .failure(let rejection): return reject(rejection.status, rejection.reason)
            }
            let result = state.withLock { s in
                s.channels.create(bundleID: bundleID, storagePolicy: policy) {
                    Data((0..<AppleChannelRules.issuedIDBytes).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
                }
            }
            switch result {
            case .limitReached: return reject(400, .cannotCreateChannelConfig)
            case .created(let id):
                return respond(SimulatorResponse(status: 201, apnsID: requestID, extraHeaders: [HTTP2HeaderField("apns-channel-id", id)]))
            }
        case .read(let bundleID):
            let id: String
            switch channelID() {
            case .success(let value): id = value
            case .failure(let rejection): return reject(rejection.status, rejection.reason)
            }
            guard let channel = state.withLock({ $0.channels.channel(id, bundleID: bundleID) }) else {
                return reject(404, .channelNotRegistered)
            }
            let body = "{\"message-storage-policy\":\(channel.storagePolicy),\"push-type\":\"\(AppleChannelRules.channelPushType)\"}"
            return respond(SimulatorResponse(status: 200, apnsID: requestID, extraHeaders: [HTTP2HeaderField("apns-channel-id", id)], successBody: body))
        case .delete(let bundleID):
            let id: String
            switch channelID() {
            case .success(let value): id = value
            case .failure(let rejection): return reject(rejection.status, rejection.reason)
            }
            guard state.withLock({ $0.channels.delete(id, bundleID: bundleID) }) else { return reject(404, .channelNotRegistered) }
            return respond(SimulatorResponse(status: 204, apnsID: requestID))
        case .list(let bundleID):
            let ids = state.withLock { $0.channels.list(bundleID: bundleID) }
            // Base64 ids need no JSON escaping.
            let body = "{\"channels\":[" + ids.map { "\"\($0)\"" }.joined(separator: ",") + "]}"
            return respond(SimulatorResponse(status: 200, apnsID: requestID, successBody: body))
        }
    }

    /// The storage policy of a create body: `{"message-storage-policy":0|1,"push-type":"LiveActivity"}`.
    static func createBody(_ body: [UInt8]) -> Result<Int, Rejection> {
        struct Body: Decodable {
            var policy: Int?
            var pushType: String?
            enum CodingKeys: String, CodingKey {
                case policy = "message-storage-policy"
                case pushType = "push-type"
            }
        }
        // JSONDecoder refuses `true`, `0.5` and strings for an Int, as Apple's integer field does.
        guard let decoded = try? JSONDecoder().decode(Body.self, from: Data(body)) else {
            return .failure(Rejection(400, badMessageStoragePolicy))
        }
        guard let pushType = decoded.pushType else { return .failure(Rejection(400, .missingPushType)) }
        guard pushType == AppleChannelRules.channelPushType else { return .failure(Rejection(400, .invalidPushType)) }
        guard let policy = decoded.policy, AppleChannelRules.storagePolicies.contains(policy) else {
            return .failure(Rejection(400, badMessageStoragePolicy))
        }
        return .success(policy)
    }

    /// Every channel the simulator holds, with what each received.
    func channels() -> [SimulatorChannel] { state.withLock { $0.channels.all } }
}

/// A channel management request's operation, from its method and path.
enum ChannelOperation: Sendable, Equatable {
    case create(bundleID: String)
    case read(bundleID: String)
    case delete(bundleID: String)
    case list(bundleID: String)

    var bundleID: String {
        switch self {
        case .create(let b), .read(let b), .delete(let b), .list(let b): return b
        }
    }

    static func route(method: String?, path: String?) -> Result<ChannelOperation, Rejection> {
        guard var path else { return .failure(Rejection(404, .badPath)) }
        if let query = path.firstIndex(of: "?") { path = String(path[..<query]) }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        // "", "1", "apps", bundle, "channels" | "all-channels"
        guard parts.count == 5, parts[0].isEmpty, parts[1] == "1", parts[2] == "apps", !parts[3].isEmpty,
            RequestValidator.isWellFormedTopic(String(parts[3]))
        else { return .failure(Rejection(404, .badPath)) }
        let bundleID = String(parts[3])
        switch (parts[4], method) {
        case ("channels", "POST"): return .success(.create(bundleID: bundleID))
        case ("channels", "GET"): return .success(.read(bundleID: bundleID))
        case ("channels", "DELETE"): return .success(.delete(bundleID: bundleID))
        case ("all-channels", "GET"): return .success(.list(bundleID: bundleID))
        case ("channels", _), ("all-channels", _): return .failure(Rejection(405, .methodNotAllowed))
        default: return .failure(Rejection(404, .badPath))
        }
    }
}
