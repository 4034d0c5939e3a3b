/// The simulator's business logic: for every request the stream handlers read, decide the answer
/// from validation, the connection's provider token history, injected faults and scripted
/// outcomes; keep the counters and the record of accepted notifications. No IO happens here;
/// the handlers carry a `StreamDecision` out.
import APNSBinaryProtocol
import APNSModel
import Foundation
import SeededRandom
import Synchronization

/// What a stream handler does with a request it has read completely.
enum StreamDecision: Sendable {
    /// Answer after `delay`. `raiseStreamLimit` asks the connection to advertise this many
    /// concurrent streams (the first token-authenticated request was validated).
    case respond(SimulatorResponse, delay: Duration, raiseStreamLimit: Int?)
    /// Keep the stream open without an answer.
    case neverAnswer
    /// Close the whole connection now, answering nothing more.
    case dropConnection
}

/// An HTTP/2 answer as Apple gives it.
struct SimulatorResponse: Sendable, Hashable {
    var status: Int
    var reason: APNSReason?
    /// ms since the epoch, only with 410.
    var timestamp: Int64?
    var apnsID: String
    var uniqueID: String?
    /// The header naming the request: `apns-id` for a device, `apns-request-id` for Apple's
    /// broadcast and channel management requests.
    var idHeader = "apns-id"
    /// Further headers (`apns-channel-id` of a created channel).
    var extraHeaders: [HTTP2HeaderField] = []
    /// A JSON body of a successful answer (a channel's description, the channel list).
    var successBody: String?
    /// The size an error body is padded to (`ScriptedOutcome.oversizedBody`); nil for Apple's own.
    var paddedTo: Int?

    /// `{"reason":"…"}` with `"timestamp"` for 410; `successBody` or nil without a reason.
    var body: String? {
        guard let reason else { return successBody }
        if let timestamp { return "{\"reason\":\"\(reason.rawValue)\",\"timestamp\":\(timestamp)}" }
        if let paddedTo {
            let head = "{\"reason\":\"\(reason.rawValue)\",\"padding\":\"", tail = "\"}"
            return head + String(repeating: "x", count: max(paddedTo - head.utf8.count - tail.utf8.count, 0)) + tail
        }
        return "{\"reason\":\"\(reason.rawValue)\"}"
    }
}

final class SimulatorEngine: Sendable {
    let configuration: SimulatorConfiguration
    let validator: RequestValidator

    struct ScriptEntry {
        var outcome: ScriptedOutcome
        var requests: Int = 0
    }

    /// Internal, not private: the broadcast and channel management decisions
    /// (`SimulatorEngine+Channels.swift`) share it.
    struct State {
        var faults = SimulatorFaults()
        var random = SeededGenerator(seed: 1)
        var scripts: [String: ScriptEntry] = [:]
        var counters = SimulatorCounters()
        var accepted: [AcceptedNotification] = []
        /// Index of the oldest record once `accepted` is full (a ring buffer).
        var acceptedStart = 0
        /// Binary frames processed since start or the last `setFaults` (`binaryStatusAtFrame`).
        var binaryFrameIndex = 0
        /// Tuples the feedback service hands out to the next connection of their app's
        /// certificate (any connection for a tuple of no app), oldest first.
        var feedback: [(topic: String?, tuple: FeedbackTuple)] = []
        /// Broadcast channels (`AppleChannels.swift`).
        var channels = ChannelBook()
    }

    let state = Mutex(State())

    init(configuration: SimulatorConfiguration) {
        self.configuration = configuration
        self.validator = RequestValidator(configuration: configuration)
    }

    // MARK: Test and operator controls

    func script(token: String, _ outcome: ScriptedOutcome) {
        let key = token.lowercased()
        state.withLock { $0.scripts[key] = ScriptEntry(outcome: outcome) }
    }

    func clearScripts() {
        state.withLock { $0.scripts.removeAll() }
    }

    func setFaults(_ faults: SimulatorFaults) {
        state.withLock {
            $0.faults = faults
            $0.random = SeededGenerator(seed: faults.seed)
            $0.binaryFrameIndex = 0
        }
    }

    var faults: SimulatorFaults { state.withLock { $0.faults } }

    func counters() -> SimulatorCounters { state.withLock { $0.counters } }

    func accepted() -> [AcceptedNotification] {
        state.withLock { s in
            Array(s.accepted[s.acceptedStart...] + s.accepted[..<s.acceptedStart])
        }
    }

    func clearAccepted() {
        state.withLock {
            $0.accepted.removeAll()
            $0.acceptedStart = 0
        }
    }

    func updateCounters(_ body: (inout SimulatorCounters) -> Void) {
        state.withLock { body(&$0.counters) }
    }

    // MARK: Deciding

    /// What to do with a request read completely on `connection`, as its `ordinal`-th stream.
    func decide(_ request: SimulatorRequest, connection: ConnectionState, ordinal: Int, now: Date = Date()) -> StreamDecision {
        let faults = state.withLock { s -> SimulatorFaults in
            s.counters.received += 1
            return s.faults
        }
        if let limit = faults.dropAfterStreams, ordinal >= limit {
            if connection.markDropped() { updateCounters { $0.droppedConnections += 1 } }
            return .dropConnection
        }

        let requestID = request.headers.first(where: { $0.name == "apns-id" })?.value
        let answerID = requestID.flatMap { RequestValidator.isCanonicalUUID($0) ? $0 : nil } ?? UUID().uuidString
        func reject(_ rejection: Rejection) -> StreamDecision {
            .respond(answer(rejection.status, rejection.reason, apnsID: answerID), delay: faults.latency, raiseStreamLimit: nil)
        }

        let route: ValidatedRoute
        switch validator.validateRoute(request) {
        case .success(let value): route = value
        case .failure(let rejection): return reject(rejection)
        }
        if let reason = faults.rejectAllTokens { return reject(Rejection(403, reason)) }

        let credential: RequestCredential
        var raiseStreamLimit: Int?
        switch authenticate(request, connection: connection, now: now.addingTimeInterval(faults.clockSkew.timeInterval)) {
        case .success(let (value, raise)):
            credential = value
            raiseStreamLimit = raise
        case .failure(let rejection): return reject(rejection)
        }

        if case .broadcast(let bundleID) = route.target {
            return decideBroadcast(
                request, bundleID: bundleID, faults: faults, raiseStreamLimit: raiseStreamLimit, credential: credential, now: now)
        }

        let notification: ValidatedNotification
        switch validator.validateNotification(request, route: route, credential: credential) {
        case .success(let value): notification = value
        case .failure(let rejection):
            return .respond(
                answer(rejection.status, rejection.reason, apnsID: answerID), delay: faults.latency,
                raiseStreamLimit: raiseStreamLimit)
        }

        enum Verdict {
            case accept
            case fail(status: Int, reason: APNSReason, timestamp: Int64?)
            case padded(status: Int, reason: APNSReason, bodyBytes: Int)
            case never
        }
        let verdict: Verdict = state.withLock { s in
            let roll = Double(s.random.next() >> 11) / Double(1 << 53)
            if roll < faults.rate429 { return .fail(status: 429, reason: .tooManyRequests, timestamp: nil) }
            if roll < faults.rate429 + faults.rate500 { return .fail(status: 500, reason: .internalServerError, timestamp: nil) }
            if roll < faults.rate429 + faults.rate500 + faults.rate503 {
                return .fail(status: 503, reason: .serviceUnavailable, timestamp: nil)
            }
            guard var entry = s.scripts[notification.tokenHex] else { return .accept }
            entry.requests += 1
            s.scripts[notification.tokenHex] = entry
            switch entry.outcome {
            case .accept: return .accept
            case .unregistered(let timestamp): return .fail(status: 410, reason: .unregistered, timestamp: timestamp)
            case .expiredToken(let timestamp): return .fail(status: 410, reason: .expiredToken, timestamp: timestamp)
            case .badDeviceToken: return .fail(status: 400, reason: .badDeviceToken, timestamp: nil)
            case .deviceTokenNotForTopic: return .fail(status: 400, reason: .deviceTokenNotForTopic, timestamp: nil)
            case .failFirst(let count, let status, let reason):
                return entry.requests <= count ? .fail(status: status, reason: reason, timestamp: nil) : .accept
            case .always(let status, let reason): return .fail(status: status, reason: reason, timestamp: nil)
            case .neverAnswer: return .never
            case .oversizedBody(let status, let reason, let bodyBytes): return .padded(status: status, reason: reason, bodyBytes: bodyBytes)
            case .binaryStatus: return .accept
            }
        }

        switch verdict {
        case .never:
            updateCounters { $0.unanswered += 1 }
            return .neverAnswer
        case .fail(let status, let reason, let timestamp):
            var response = answer(status, reason, apnsID: answerID)
            response.timestamp = timestamp
            return .respond(response, delay: faults.latency, raiseStreamLimit: raiseStreamLimit)
        case .padded(let status, let reason, let bodyBytes):
            var response = answer(status, reason, apnsID: answerID)
            response.paddedTo = bodyBytes
            return .respond(response, delay: faults.latency, raiseStreamLimit: raiseStreamLimit)
        case .accept:
            let record = AcceptedNotification(
                token: notification.tokenHex, topic: notification.topic, apnsID: answerID,
                pushType: notification.pushType.name, priority: notification.priority,
                expiration: notification.expiration, collapseID: notification.collapseID,
                payload: request.body, authentication: credential.acceptedAuthentication, receivedAt: now)
            state.withLock { s in
                s.counters.accepted += 1
                self.keep(record, in: &s)
            }
            return .respond(
                SimulatorResponse(status: 200, apnsID: answerID, uniqueID: uniqueID()), delay: faults.latency,
                raiseStreamLimit: raiseStreamLimit)
        }
    }

    /// Keeps `record` for `accepted()`, dropping the oldest once `recordLimit` are kept.
    func keep(_ record: AcceptedNotification, in s: inout State) {
        let limit = configuration.recordLimit
        guard limit > 0 else { return }
        if s.accepted.count < limit {
            s.accepted.append(record)
        } else {
            s.accepted[s.acceptedStart] = record
            s.acceptedStart = (s.acceptedStart + 1) % limit
        }
    }

    // MARK: Binary gateway

    /// What to do with a frame the strict decoder accepted, the `ordinal`-th processed on its
    /// connection. Order: the fault at this global position, random faults, the token's script,
    /// then the per-connection shutdown and silent-close faults.
    func decideBinary(_ frame: AppleBinaryProtocol.Frame, ordinal: Int, topic: String, now: Date = Date()) -> BinaryFrameDecision {
        let tokenHex = DeviceToken(bytes: frame.token).hex
        return state.withLock { s in
            s.counters.binaryReceived += 1
            s.binaryFrameIndex += 1
            let faults = s.faults
            var decision = BinaryFrameDecision.accept
            let roll = Double(s.random.next() >> 11) / Double(1 << 53)
            if let raw = faults.binaryStatusAtFrame[s.binaryFrameIndex] {
                decision = .injected(raw)
            } else if roll < faults.rate429 + faults.rate500 + faults.rate503 {
                decision = .reject(AppleBinaryProtocol.Status.processingError)
            } else if var entry = s.scripts[tokenHex] {
                entry.requests += 1
                s.scripts[tokenHex] = entry
                if let status = entry.outcome.binaryAnswer(requestNumber: entry.requests) { decision = .injected(status) }
            } else if frame.priority.map({ $0 != 10 && $0 != 5 }) ?? false {
                decision = .reject(AppleBinaryProtocol.Status.protocolError)
            }
            if decision == .accept {
                if let limit = faults.binaryShutdownAfterFrames, ordinal >= limit {
                    decision = .acceptAndShutdown
                } else if let limit = faults.binaryCloseSilentlyAfterFrames, ordinal >= limit {
                    decision = .acceptAndCloseSilently
                }
            }
            switch decision {
            case .accept, .acceptAndShutdown, .acceptAndCloseSilently:
                s.counters.binaryAccepted += 1
                self.keep(
                    AcceptedNotification(
                        token: tokenHex, topic: topic, apnsID: "", pushType: AppleRules.alert.name, priority: Int(frame.priority ?? 10),
                        expiration: frame.expiration.map { Int($0) }, collapseID: nil, payload: frame.payload,
                        authentication: .certificate, receivedAt: now, transport: .binary, binaryIdentifier: frame.identifier),
                    in: &s)
                if decision == .acceptAndShutdown { s.counters.binaryByStatus[AppleBinaryProtocol.Status.shutdown, default: 0] += 1 }
                if decision == .acceptAndCloseSilently { s.counters.binarySilentCloses += 1 }
            case .reject(let status):
                s.counters.binaryByStatus[status, default: 0] += 1
            }
            return decision
        }
    }

    /// A frame the strict decoder refused: counted, answered with the decoder's status.
    func binaryFrameRefused(_ refusal: AppleBinaryProtocol.Refusal) {
        state.withLock { s in
            s.counters.binaryReceived += 1
            s.binaryFrameIndex += 1
            s.counters.binaryByStatus[refusal.status, default: 0] += 1
        }
    }

    // MARK: Feedback service

    /// Queues a tuple for the app `topic` (Apple's feedback service tells each app's certificate
    /// about its own devices), or for whichever connection comes next when nil.
    func addFeedback(_ tuple: FeedbackTuple, topic: String? = nil) {
        state.withLock { $0.feedback.append((topic, tuple)) }
    }

    /// The queued tuples a connection of the certificate of `topic` is served (every one when
    /// nil), removed from the queue: a feedback connection serves each once.
    func takeQueuedFeedback(topic: String?) -> [(topic: String?, tuple: FeedbackTuple)] {
        state.withLock { s in
            let served = s.feedback.filter { topic == nil || $0.topic == nil || $0.topic == topic }
            s.feedback.removeAll { topic == nil || $0.topic == nil || $0.topic == topic }
            s.counters.feedbackConnections += 1
            if let topic { s.counters.feedbackConnectionsByTopic[topic, default: 0] += 1 }
            s.counters.feedbackTuplesServed += served.count
            return served
        }
    }

    /// Tuples whose write failed go back to the front of the queue.
    func returnQueuedFeedback(_ queued: [(topic: String?, tuple: FeedbackTuple)]) {
        state.withLock { s in
            s.counters.feedbackTuplesServed -= queued.count
            s.feedback.insert(contentsOf: queued, at: 0)
        }
    }

    var pendingFeedback: [FeedbackTuple] { state.withLock { $0.feedback.map(\.tuple) } }

    /// An error answer, counted.
    func answer(_ status: Int, _ reason: APNSReason, apnsID: String) -> SimulatorResponse {
        state.withLock { s in
            s.counters.rejected += 1
            s.counters.byStatus[status, default: 0] += 1
            s.counters.byReason[reason.rawValue, default: 0] += 1
        }
        return SimulatorResponse(status: status, reason: reason, apnsID: apnsID, uniqueID: uniqueID())
    }

    /// `apns-unique-id`: Apple's development environment names every answer, errors included,
    /// for its delivery log; production sends none.
    func uniqueID() -> String? {
        configuration.environment == .sandbox ? UUID().uuidString.lowercased() : nil
    }

    /// Authentication with the connection's memory: a token seen before on the connection is not
    /// verified again (only its age is checked), a token of another team than the connection's
    /// first is `UnrelatedKeyIdInToken`, and a new token too soon after the previous one is
    /// `TooManyProviderTokenUpdates`. Only tokens that verified count as the connection's.
    func authenticate(
        _ request: SimulatorRequest, connection: ConnectionState, now: Date
    ) -> Result<(RequestCredential, Int?), Rejection> {
        if let authorization = request.headers.first(where: { $0.name == "authorization" })?.value,
            let known = connection.knownCredential(authorization: authorization)
        {
            if case .token(_, _, _, let issuedAt) = known, validator.isExpired(issuedAt: issuedAt, now: now) {
                return .failure(Rejection(403, .expiredProviderToken))
            }
            return .success((known, nil))
        }
        let credential: RequestCredential
        switch validator.authenticate(request, hasClientCertificate: connection.hasClientCertificate ?? false, now: now) {
        case .success(let value): credential = value
        case .failure(let rejection): return .failure(rejection)
        }
        guard case .token = credential, let authorization = request.headers.first(where: { $0.name == "authorization" })?.value else {
            return .success((credential, nil))
        }
        switch connection.adoptToken(
            authorization: authorization, credential: credential, now: now,
            minimumInterval: configuration.minimumTokenUpdateInterval)
        {
        case .tooSoon:
            return .failure(Rejection(429, .tooManyProviderTokenUpdates))
        case .otherTeam:
            return .failure(Rejection(403, .unrelatedKeyIdInToken))
        case .adopted(let first):
            let raise = first && configuration.maxConcurrentStreamsBeforeFirstToken != nil
            return .success((credential, raise ? currentStreamLimit : nil))
        }
    }

    /// The SETTINGS_MAX_CONCURRENT_STREAMS a fully authenticated connection advertises.
    var currentStreamLimit: Int {
        faults.maxConcurrentStreams ?? configuration.maxConcurrentStreams
    }
}

/// What the binary gateway does with one decoded frame.
enum BinaryFrameDecision: Sendable, Hashable {
    /// Accepted (recorded); keep reading.
    case accept
    /// Accepted, then an error response with status 10 naming this frame as the last one
    /// processed, then close.
    case acceptAndShutdown
    /// Accepted, then close without an error response.
    case acceptAndCloseSilently
    /// Not accepted: an error response with this status naming the frame, then close.
    case reject(UInt8)

    /// An injected status: 10 is Apple's shutdown, which names the last frame it processed.
    static func injected(_ status: UInt8) -> BinaryFrameDecision {
        status == AppleBinaryProtocol.Status.shutdown ? .acceptAndShutdown : .reject(status)
    }
}

extension ScriptedOutcome {
    /// The binary status for the `requestNumber`-th frame of a scripted token, nil to accept it.
    /// HTTP/2 outcomes map to what the binary API said for the same fault: a dead token is 8,
    /// an oversized payload 7, a server-side failure 1 (processing error), anything else 255.
    func binaryAnswer(requestNumber: Int) -> UInt8? {
        switch self {
        case .accept, .neverAnswer: return nil
        case .unregistered, .expiredToken, .badDeviceToken, .deviceTokenNotForTopic: return AppleBinaryProtocol.Status.invalidToken
        case .binaryStatus(let raw): return raw
        case .failFirst(let count, let status, let reason):
            return requestNumber <= count ? Self.binaryAnswer(httpStatus: status, reason: reason) : nil
        case .always(let status, let reason), .oversizedBody(let status, let reason, _):
            return Self.binaryAnswer(httpStatus: status, reason: reason)
        }
    }

    static func binaryAnswer(httpStatus: Int, reason: APNSReason) -> UInt8 {
        switch (httpStatus, reason) {
        case (410, _), (400, .badDeviceToken), (400, .deviceTokenNotForTopic): return AppleBinaryProtocol.Status.invalidToken
        case (413, _), (400, .payloadTooLarge): return AppleBinaryProtocol.Status.invalidPayloadSize
        case (429, _), (500, _), (503, _): return AppleBinaryProtocol.Status.processingError
        default: return AppleBinaryProtocol.Status.unknown
        }
    }
}

extension RequestCredential {
    var acceptedAuthentication: AcceptedNotification.Authentication {
        switch self {
        case .token(_, let keyID, let teamID, _): return .token(keyID: keyID, teamID: teamID)
        case .certificate: return .certificate
        }
    }
}
