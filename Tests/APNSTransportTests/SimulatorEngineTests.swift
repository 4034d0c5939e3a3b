/// The simulator's decisions without sockets, where a test needs a clock it controls: provider
/// token age and update rate, the bounded record of accepted notifications, the drop fault.
import APNSCore
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
        #expect(connection.streamOpened(goawayAfter: 2) == .process(ordinal: 1))
        #expect(connection.streamOpened(goawayAfter: 2) == .processAndGoAway(ordinal: 2))
        #expect(connection.streamOpened(goawayAfter: 2) == .refuse)
        #expect(connection.streamClosed() == false)
        #expect(connection.streamClosed() == true)
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
}
