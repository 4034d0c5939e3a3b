/// The simulator's decisions without sockets, where a test needs a clock it controls: provider
/// token age and update rate, the bounded record of accepted notifications, the drop fault.
import APNSBinaryProtocol
import APNSModel
import Foundation
import Testing

@testable import APNSSimulator

@Suite("Simulator engine")
struct SimulatorEngineTests {
    private typealias Env = SimulatorTestEnvironment

    private func request(jwt: String, device: String = "abcd0123", apnsID: String? = nil) -> SimulatorRequest {
        var headers: [(name: String, value: String)] = [
            (name: "authorization", value: "bearer \(jwt)"), (name: "apns-topic", value: Env.bundle),
        ]
        if let apnsID { headers.append((name: "apns-id", value: apnsID)) }
        let body = Array(#"{"aps":{"alert":"x"}}"#.utf8)
        return SimulatorRequest(method: "POST", path: "/3/device/\(device)", headers: headers, body: body, bodyLength: body.count)
    }

    private func answer(_ decision: StreamDecision) -> (Int, String?)? {
        guard case .respond(let response, _, _) = decision else { return nil }
        return (response.status, response.reason?.rawValue)
    }

    @Test("a connection may change its token after 20 minutes, not before; a known token is re-checked for age")
    func tokenUpdatesAndAge() throws {
        let engine = SimulatorEngine(configuration: Env.configuration())
        let connection = ConnectionState()
        let start = Date()
        let first = try Env.credentials.providerToken(issuedAt: start)
        let second = try Env.credentials.providerToken(issuedAt: start.addingTimeInterval(60))

        #expect(answer(engine.decide(request(jwt: first), connection: connection, ordinal: 1, now: start)) ?? (0, nil) == (200, nil))
        let tooSoon = engine.decide(request(jwt: second), connection: connection, ordinal: 2, now: start.addingTimeInterval(10 * 60))
        #expect(answer(tooSoon) ?? (0, nil) == (429, "TooManyProviderTokenUpdates"))
        let later = start.addingTimeInterval(20 * 60 + 1)
        #expect(answer(engine.decide(request(jwt: second), connection: connection, ordinal: 3, now: later)) ?? (0, nil) == (200, nil))

        // The connection's token ages out even though its signature was checked long ago.
        let old = start.addingTimeInterval(60 + 3600 + 1)
        let expired = engine.decide(request(jwt: second), connection: connection, ordinal: 4, now: old)
        #expect(answer(expired) ?? (0, nil) == (403, "ExpiredProviderToken"))
    }

    @Test("the first valid token raises a connection's stream limit when configured")
    func streamLimitRaise() throws {
        let engine = SimulatorEngine(
            configuration: Env.configuration {
                $0.maxConcurrentStreams = 500
                $0.maxConcurrentStreamsBeforeFirstToken = 1
            })
        let connection = ConnectionState()
        let jwt = try Env.token()
        guard case .respond(_, _, let raise) = engine.decide(request(jwt: jwt), connection: connection, ordinal: 1) else {
            Issue.record("no answer")
            return
        }
        #expect(raise == 500)
        guard case .respond(_, _, let again) = engine.decide(request(jwt: jwt), connection: connection, ordinal: 2) else {
            Issue.record("no answer")
            return
        }
        #expect(again == nil)
    }

    @Test("accepted notifications are kept up to recordLimit, newest last")
    func boundedRecord() throws {
        let engine = SimulatorEngine(configuration: Env.configuration { $0.recordLimit = 2 })
        let connection = ConnectionState()
        let jwt = try Env.token()
        for device in ["aa01", "aa02", "aa03"] {
            _ = engine.decide(request(jwt: jwt, device: device), connection: connection, ordinal: 1)
        }
        #expect(engine.accepted().map(\.token) == ["aa02", "aa03"])
        #expect(engine.counters().accepted == 3)
        engine.clearAccepted()
        #expect(engine.accepted().isEmpty)
    }

    @Test("the drop fault drops from the N-th stream on and counts each connection once")
    func dropDecision() throws {
        let engine = SimulatorEngine(configuration: Env.configuration())
        engine.setFaults(SimulatorFaults(dropAfterStreams: 2))
        let connection = ConnectionState()
        let jwt = try Env.token()
        #expect(answer(engine.decide(request(jwt: jwt), connection: connection, ordinal: 1)) ?? (0, nil) == (200, nil))
        for ordinal in 2...3 {
            guard case .dropConnection = engine.decide(request(jwt: jwt), connection: connection, ordinal: ordinal) else {
                Issue.record("stream \(ordinal) was not dropped")
                continue
            }
        }
        #expect(engine.counters().droppedConnections == 1)
    }

    @Test("GOAWAY admission: streams up to the N-th are processed, later ones refused")
    func goawayAdmission() {
        let connection = ConnectionState()
        #expect(connection.streamOpened(streamID: 1, goawayAfter: 2) == .process(ordinal: 1))
        #expect(connection.streamOpened(streamID: 3, goawayAfter: 2) == .processAndGoAway(ordinal: 2))
        #expect(connection.streamOpened(streamID: 5, goawayAfter: 2) == .refuse)
        #expect(connection.streamClosed() == false)
        #expect(connection.streamClosed() == true)
    }

    @Test("GOAWAY is sent once every request up to the last stream has been read, naming that stream")
    func goawayWaitsForTheRequestsItCovers() {
        let connection = ConnectionState()
        _ = connection.streamOpened(streamID: 1, goawayAfter: 3)
        _ = connection.streamOpened(streamID: 3, goawayAfter: 3)
        _ = connection.streamOpened(streamID: 5, goawayAfter: 3)
        #expect(connection.streamOpened(streamID: 7, goawayAfter: 3) == .refuse)
        // Requests are read in any order; the frame waits for the last of the three.
        #expect(connection.requestRead() == nil)
        #expect(connection.requestRead() == nil)
        #expect(connection.requestRead() == 5)
    }

    @Test("an invalid apns-id is answered with a fresh one; a valid one is echoed")
    func answerIDs() throws {
        let engine = SimulatorEngine(configuration: Env.configuration())
        let connection = ConnectionState()
        let jwt = try Env.token()
        guard case .respond(let bad, _, _) = engine.decide(request(jwt: jwt, apnsID: "nope"), connection: connection, ordinal: 1),
            case .respond(let good, _, _) = engine.decide(
                request(jwt: jwt, apnsID: "8e6b1c5d-7a0f-4b8e-9c2d-1f3a5b7c9d0e"), connection: connection, ordinal: 2)
        else {
            Issue.record("no answer")
            return
        }
        #expect(bad.reason == .badMessageId)
        #expect(UUID(uuidString: bad.apnsID) != nil)
        #expect(good.status == 200)
        #expect(good.apnsID == "8e6b1c5d-7a0f-4b8e-9c2d-1f3a5b7c9d0e")
        #expect(SimulatorResponse(status: 410, reason: .unregistered, timestamp: 5, apnsID: "x").body == #"{"reason":"Unregistered","timestamp":5}"#)
    }

    // MARK: Binary gateway decisions

    private func binaryFrame(_ token: [UInt8], identifier: UInt32, priority: UInt8? = 10) -> AppleBinaryProtocol.Frame {
        AppleBinaryProtocol.Frame(token: token, payload: Array(#"{"aps":{}}"#.utf8), identifier: identifier, expiration: nil, priority: priority)
    }

    @Test("binary decisions: the global position beats the token's script; status 10 accepts the frame it names")
    func binaryDecisionOrder() {
        let engine = SimulatorEngine(configuration: Env.configuration())
        let scripted = [UInt8](repeating: 7, count: 32)
        engine.script(token: DeviceToken(bytes: scripted).hex, .binaryStatus(8))
        engine.setFaults(SimulatorFaults(binaryStatusAtFrame: [1: 10, 2: 1]))
        #expect(engine.decideBinary(binaryFrame(scripted, identifier: 1), ordinal: 1, topic: "t") == .acceptAndShutdown)
        #expect(engine.decideBinary(binaryFrame(scripted, identifier: 2), ordinal: 1, topic: "t") == .reject(BinaryStatus.processingError.rawValue))
        #expect(engine.decideBinary(binaryFrame(scripted, identifier: 3), ordinal: 1, topic: "t") == .reject(BinaryStatus.invalidToken.rawValue))
        let other = [UInt8](repeating: 1, count: 32)
        #expect(engine.decideBinary(binaryFrame(other, identifier: 4, priority: nil), ordinal: 1, topic: "t") == .accept)
        #expect(engine.decideBinary(binaryFrame(other, identifier: 5, priority: 1), ordinal: 2, topic: "t") == .reject(BinaryStatus.protocolError.rawValue))
        #expect(engine.accepted().map(\.binaryIdentifier) == [1, 4])
        #expect(engine.accepted().last?.priority == 10)
        let counters = engine.counters()
        #expect(counters.binaryReceived == 5)
        #expect(counters.binaryAccepted == 2)
        #expect(counters.binaryByStatus == [10: 1, 1: 1, 8: 1, 128: 1])

        // setFaults restarts the count: position 1 is the next frame again.
        engine.setFaults(SimulatorFaults(binaryStatusAtFrame: [1: 8]))
        #expect(engine.decideBinary(binaryFrame(other, identifier: 6), ordinal: 1, topic: "t") == .reject(BinaryStatus.invalidToken.rawValue))
    }

    @Test("per-connection faults count the connection's own frames; shutdown wins over a silent close at the same frame")
    func binaryConnectionFaults() {
        let engine = SimulatorEngine(configuration: Env.configuration())
        engine.setFaults(SimulatorFaults(binaryShutdownAfterFrames: 3, binaryCloseSilentlyAfterFrames: 3))
        let token = [UInt8](repeating: 2, count: 32)
        #expect(engine.decideBinary(binaryFrame(token, identifier: 1), ordinal: 2, topic: "t") == .accept)
        #expect(engine.decideBinary(binaryFrame(token, identifier: 2), ordinal: 3, topic: "t") == .acceptAndShutdown)
        engine.setFaults(SimulatorFaults(binaryCloseSilentlyAfterFrames: 1))
        #expect(engine.decideBinary(binaryFrame(token, identifier: 3), ordinal: 1, topic: "t") == .acceptAndCloseSilently)
        #expect(engine.counters().binarySilentCloses == 1)
    }

    @Test("HTTP/2 scripts map to the binary status Apple gave for the same fault", arguments: [
        (410, APNSReason.unregistered, BinaryStatus.invalidToken), (400, .badDeviceToken, .invalidToken),
        (400, .deviceTokenNotForTopic, .invalidToken), (413, .payloadTooLarge, .invalidPayloadSize),
        (429, .tooManyRequests, .processingError), (500, .internalServerError, .processingError),
        (503, .serviceUnavailable, .processingError), (400, .badTopic, .unknown), (403, .invalidProviderToken, .unknown),
    ])
    func httpToBinaryStatus(_ status: Int, _ reason: APNSReason, _ binary: BinaryStatus) {
        #expect(ScriptedOutcome.binaryAnswer(httpStatus: status, reason: reason) == binary.rawValue)
        #expect(ScriptedOutcome.failFirst(1, status: status, reason: reason).binaryAnswer(requestNumber: 1) == binary.rawValue)
        #expect(ScriptedOutcome.failFirst(1, status: status, reason: reason).binaryAnswer(requestNumber: 2) == nil)
    }

    @Test("feedback tuples are served once; returned ones go back to the front")
    func feedbackQueue() {
        let engine = SimulatorEngine(configuration: Env.configuration())
        let a = FeedbackTuple(timestamp: 1, deviceToken: [UInt8](repeating: 1, count: 32))
        let b = FeedbackTuple(timestamp: 2, deviceToken: [UInt8](repeating: 2, count: 32))
        engine.addFeedback(a)
        #expect(engine.takeFeedback() == [a])
        engine.addFeedback(b)
        engine.returnFeedback([a])
        #expect(engine.pendingFeedback == [a, b])
        #expect(engine.takeFeedback() == [a, b])
        #expect(engine.takeFeedback().isEmpty)
        // The returned tuple counts once, when it was finally served.
        #expect(engine.counters().feedbackTuplesServed == 2)
        #expect(engine.counters().feedbackConnections == 3)
    }

    @Test("a tuple queued for an app is served to that app's certificate only")
    func feedbackPerApp() {
        let engine = SimulatorEngine(configuration: Env.configuration())
        let mine = FeedbackTuple(timestamp: 1, deviceToken: [UInt8](repeating: 1, count: 32))
        let anyone = FeedbackTuple(timestamp: 2, deviceToken: [UInt8](repeating: 2, count: 32))
        engine.addFeedback(mine, topic: "com.example.mine")
        engine.addFeedback(anyone)
        #expect(engine.takeFeedback(topic: "com.example.other") == [anyone])
        #expect(engine.pendingFeedback == [mine])
        #expect(engine.takeFeedback(topic: "com.example.mine") == [mine])
        #expect(engine.counters().feedbackConnectionsByTopic == ["com.example.other": 1, "com.example.mine": 1])
    }
}

extension SimulatorEngine {
    /// The tuples alone of `takeQueuedFeedback`.
    func takeFeedback(topic: String? = nil) -> [FeedbackTuple] {
        takeQueuedFeedback(topic: topic).map(\.tuple)
    }

    /// `returnQueuedFeedback` of tuples queued for any topic.
    func returnFeedback(_ tuples: [FeedbackTuple]) {
        returnQueuedFeedback(tuples.map { (topic: String?.none, tuple: $0) })
    }
}
