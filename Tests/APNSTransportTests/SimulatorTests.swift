/// The simulator against HTTP/2 clients this project did not write (curl, Python h2): Apple's
/// validation rows, provider token rules, scripted outcomes and injected faults.
import APNSModel
import Foundation
import TestSupport
import Testing

@testable import APNSSimulator

private typealias Env = SimulatorTestEnvironment

@Suite("Simulator with curl")
struct SimulatorCurlTests {
    @Test("curl --http2 with a provider token gets 200, the apns-id echoed, the notification recorded")
    func acceptsValidRequest() async throws {
        try await Env.withSimulator { simulator in
            let device = Env.deviceToken()
            let id = "8E6B1C5D-7A0F-4B8E-9C2D-1F3A5B7C9D0E"
            let answer = try await Curl.send(
                port: simulator.port, path: "/3/device/\(device)",
                headers: [
                    "authorization: bearer \(try Env.token())", "apns-topic: \(Env.bundle)", "apns-push-type: alert",
                    "apns-id: \(id)", "apns-priority: 10", "apns-expiration: 0", "apns-collapse-id: news",
                ],
                body: #"{"aps":{"alert":"hi"}}"#)
            #expect(answer.httpVersion == "HTTP/2")
            #expect(answer.status == 200)
            #expect(answer.headers["apns-id"] == id)
            #expect(answer.headers["apns-unique-id"] == nil)
            #expect(answer.body.isEmpty)

            let accepted = simulator.accepted()
            #expect(accepted.count == 1)
            let record = try #require(accepted.first)
            #expect(record.token == device)
            #expect(record.topic == Env.bundle)
            #expect(record.apnsID == id)
            #expect(record.pushType == "alert")
            #expect(record.priority == 10)
            #expect(record.expiration == 0)
            #expect(record.collapseID == "news")
            #expect(String(decoding: record.payload, as: UTF8.self) == #"{"aps":{"alert":"hi"}}"#)
            #expect(record.authentication == .token(keyID: Env.keyID, teamID: Env.teamID))
            #expect(simulator.counters().accepted == 1)
            #expect(simulator.counters().received == 1)
        }
    }

    @Test("without apns-id the simulator assigns one; sandbox answers carry apns-unique-id")
    func assignsIDAndUniqueID() async throws {
        try await Env.withSimulator({ $0.environment = .sandbox }) { simulator in
            let answer = try await Curl.send(
                port: simulator.port, path: "/3/device/\(Env.deviceToken())",
                headers: ["authorization: bearer \(try Env.token())", "apns-topic: \(Env.bundle)"],
                body: #"{"aps":{"alert":"hi"}}"#)
            #expect(answer.status == 200)
            let id = try #require(answer.headers["apns-id"])
            #expect(UUID(uuidString: id) != nil)
            #expect(answer.headers["apns-unique-id"].flatMap { UUID(uuidString: $0) } != nil)
            #expect(simulator.accepted().first?.apnsID == id)
        }
    }

    @Test("sandbox error answers carry apns-unique-id too, as Apple's development environment's do; production's none")
    func errorAnswersCarryUniqueIDInSandbox() async throws {
        for environment in [APNSEnvironment.sandbox, .production] {
            try await Env.withSimulator({ $0.environment = environment }) { simulator in
                let device = Env.deviceToken()
                simulator.script(token: device, .unregistered(timestamp: 1_700_000_000_000))
                let answer = try await Curl.send(
                    port: simulator.port, path: "/3/device/\(device)",
                    headers: ["authorization: bearer \(try Env.token())", "apns-topic: \(Env.bundle)"],
                    body: #"{"aps":{"alert":"hi"}}"#)
                #expect(answer.status == 410)
                #expect(answer.reason == "Unregistered")
                let uniqueID = answer.headers["apns-unique-id"].flatMap { UUID(uuidString: $0) }
                #expect((uniqueID != nil) == (environment == .sandbox), "\(environment)")
            }
        }
    }

    @Test("a TLS client certificate without a token is accepted; neither is 403 MissingProviderToken")
    func certificateAuthentication() async throws {
        try await Env.withSimulator { simulator in
            let path = "/3/device/\(Env.deviceToken())"
            let withCertificate = try await Curl.send(
                port: simulator.port, path: path, headers: ["apns-topic: \(Env.bundle)"], body: #"{"aps":{}}"#,
                clientCertificate: true)
            #expect(withCertificate.status == 200)
            #expect(simulator.accepted().first?.authentication == .certificate)

            let without = try await Curl.send(port: simulator.port, path: path, headers: ["apns-topic: \(Env.bundle)"], body: #"{"aps":{}}"#)
            #expect(without.status == 403)
            #expect(without.reason == "MissingProviderToken")
        }
    }

    @Test("with requireClientCertificate a client without a certificate cannot connect")
    func requiredClientCertificate() async throws {
        try await Env.withSimulator({ $0.tls.requireClientCertificate = true }) { simulator in
            let path = "/3/device/\(Env.deviceToken())"
            let accepted = try await Curl.send(
                port: simulator.port, path: path, headers: ["apns-topic: \(Env.bundle)"], body: #"{"aps":{}}"#,
                clientCertificate: true)
            #expect(accepted.status == 200)
            await #expect(throws: (any Error).self) {
                try await Curl.send(port: simulator.port, path: path, headers: ["apns-topic: \(Env.bundle)"], body: #"{"aps":{}}"#)
            }
            #expect(simulator.counters().received == 1)
        }
    }

    @Test("the server certificate is valid for 127.0.0.1 as well as localhost")
    func ipAddressSAN() async throws {
        try await Env.withSimulator { simulator in
            let answer = try await Curl.send(
                port: simulator.port, path: "/3/device/\(Env.deviceToken())",
                headers: ["authorization: bearer \(try Env.token())", "apns-topic: \(Env.bundle)"], body: #"{"aps":{}}"#,
                host: "127.0.0.1")
            #expect(answer.status == 200)
        }
    }

    @Test("scripted outcomes per token: 410 with timestamp, 400 reasons, failFirst then 200, always")
    func scriptedOutcomes() async throws {
        try await Env.withSimulator { simulator in
            let jwt = try Env.token()
            func send(_ device: String) async throws -> CurlAnswer {
                try await Curl.send(
                    port: simulator.port, path: "/3/device/\(device)",
                    headers: ["authorization: bearer \(jwt)", "apns-topic: \(Env.bundle)"], body: #"{"aps":{}}"#)
            }
            let gone = Env.deviceToken(), bad = Env.deviceToken(), other = Env.deviceToken()
            let flaky = Env.deviceToken(), broken = Env.deviceToken(), expired = Env.deviceToken()
            simulator.script(token: gone.uppercased(), .unregistered(timestamp: 1_700_000_000_123))
            simulator.script(token: bad, .badDeviceToken)
            simulator.script(token: other, .deviceTokenNotForTopic)
            simulator.script(token: flaky, .failFirst(2, status: 503, reason: .serviceUnavailable))
            simulator.script(token: broken, .always(status: 500, reason: .internalServerError))
            simulator.script(token: expired, .expiredToken(timestamp: 42))

            let unregistered = try await send(gone)
            #expect(unregistered.status == 410)
            #expect(unregistered.reason == "Unregistered")
            #expect(unregistered.timestamp == 1_700_000_000_123)
            #expect(unregistered.headers["apns-id"] != nil)

            let expiredAnswer = try await send(expired)
            #expect(expiredAnswer.status == 410)
            #expect(expiredAnswer.reason == "ExpiredToken")
            #expect(expiredAnswer.timestamp == 42)

            await #expect(try send(bad).reason == "BadDeviceToken")
            await #expect(try send(other).status == 400)
            await #expect(try send(other).reason == "DeviceTokenNotForTopic")

            await #expect(try send(flaky).status == 503)
            await #expect(try send(flaky).reason == "ServiceUnavailable")
            await #expect(try send(flaky).status == 200)
            await #expect(try send(flaky).status == 200)

            for _ in 0..<3 { await #expect(try send(broken).status == 500) }

            simulator.clearScripts()
            await #expect(try send(gone).status == 200)

            let counters = simulator.counters()
            #expect(counters.byStatus[503] == 2)
            #expect(counters.byStatus[500] == 3)
            #expect(counters.count(.unregistered) == 1)
            #expect(counters.count(.deviceTokenNotForTopic) == 2)
            #expect(counters.accepted == 3)
        }
    }
}

@Suite("Simulator validation with Python h2")
struct SimulatorValidationTests {
    struct Row {
        var name: String
        var request: H2Request
        var status: Int
        var reason: String?
    }

    static func payload(ofSize size: Int) -> String {
        let frame = #"{"aps":{"alert":""}}"#
        return #"{"aps":{"alert":""# + String(repeating: "x", count: size - frame.utf8.count) + #""}}"#
    }

    @Test("every validation row answers Apple's status and reason")
    func validationRows() async throws {
        try await Env.withSimulator { simulator in
            let jwt = try Env.token()
            let device = "/3/device/\(Env.deviceToken())"
            let body = #"{"aps":{"alert":"hi"}}"#
            func row(
                _ name: String, path: String = device, method: String = "POST", topic: String? = Env.bundle,
                with extra: [[String]] = [], body: String = body, _ status: Int, _ reason: String?
            ) -> Row {
                var headers = [["authorization", "bearer \(jwt)"]]
                if let topic { headers.append(["apns-topic", topic]) }
                return Row(
                    name: name, request: H2Request(path: path, method: method, headers: headers + extra, body: body),
                    status: status, reason: reason)
            }
            let rows: [Row] = [
                row("valid alert", with: [["apns-push-type", "alert"]], 200, nil),
                row("GET", method: "GET", body: "", 405, "MethodNotAllowed"),
                row("unknown path", path: "/3/notifications/abc", 404, "BadPath"),
                row("old path", path: "/2/device/abcd", 404, "BadPath"),
                row("no token", path: "/3/device/", 400, "MissingDeviceToken"),
                row("no token, no slash", path: "/3/device", 400, "MissingDeviceToken"),
                row("non-hex token", path: "/3/device/zz11", 400, "BadDeviceToken"),
                row("odd-length token", path: "/3/device/abc", 400, "BadDeviceToken"),
                row("no topic", topic: nil, 400, "MissingTopic"),
                row("unknown topic", topic: "com.other.app", 400, "TopicDisallowed"),
                row("malformed topic", topic: "com.example app!", 400, "BadTopic"),
                row("unknown push type", with: [["apns-push-type", "loud"]], 400, "InvalidPushType"),
                row("voip without suffix", with: [["apns-push-type", "voip"]], 400, "InvalidPushType"),
                row("voip suffix with alert type", topic: Env.bundle + ".voip", with: [["apns-push-type", "alert"]], 400, "InvalidPushType"),
                row("voip", topic: Env.bundle + ".voip", with: [["apns-push-type", "voip"]], 200, nil),
                row("voip inferred from topic", topic: Env.bundle + ".voip", 200, nil),
                row("liveactivity", topic: Env.bundle + ".push-type.liveactivity", with: [["apns-push-type", "liveactivity"]], 200, nil),
                row("location", topic: Env.legacyBundle + ".location-query", with: [["apns-push-type", "location"]], 200, nil),
                row("complication", topic: Env.bundle + ".complication", with: [["apns-push-type", "complication"]], 200, nil),
                row("fileprovider", topic: Env.bundle + ".pushkit.fileprovider", with: [["apns-push-type", "fileprovider"]], 200, nil),
                row("pushtotalk", topic: Env.bundle + ".voip-ptt", with: [["apns-push-type", "pushtotalk"]], 200, nil),
                row("priority 7", with: [["apns-priority", "7"]], 400, "BadPriority"),
                row("priority text", with: [["apns-priority", "high"]], 400, "BadPriority"),
                row("priority 1", with: [["apns-priority", "1"]], 200, nil),
                row(
                    "background priority 10", with: [["apns-push-type", "background"], ["apns-priority", "10"]],
                    body: #"{"aps":{"content-available":1}}"#, 400, "BadPriority"),
                row(
                    "background priority 5", with: [["apns-push-type", "background"], ["apns-priority", "5"]],
                    body: #"{"aps":{"content-available":1}}"#, 200, nil),
                row("apns-id not a UUID", with: [["apns-id", "1234"]], 400, "BadMessageId"),
                row("apns-id without dashes", with: [["apns-id", "8E6B1C5D7A0F4B8E9C2D1F3A5B7C9D0E"]], 400, "BadMessageId"),
                row("apns-id lower case", with: [["apns-id", "8e6b1c5d-7a0f-4b8e-9c2d-1f3a5b7c9d0e"]], 200, nil),
                row("collapse id 65 bytes", with: [["apns-collapse-id", String(repeating: "c", count: 65)]], 400, "BadCollapseId"),
                row("collapse id 64 bytes", with: [["apns-collapse-id", String(repeating: "c", count: 64)]], 200, nil),
                row("expiration text", with: [["apns-expiration", "tomorrow"]], 400, "BadExpirationDate"),
                row("expiration negative", with: [["apns-expiration", "-5"]], 400, "BadExpirationDate"),
                row("expiration", with: [["apns-expiration", "1900000000"]], 200, nil),
                row("duplicate topic", with: [["apns-topic", Env.legacyBundle]], 400, "DuplicateHeaders"),
                row("duplicate priority", with: [["apns-priority", "10"], ["apns-priority", "5"]], 400, "DuplicateHeaders"),
                row("empty payload", body: "", 400, "PayloadEmpty"),
                row("payload 4096", body: Self.payload(ofSize: 4096), 200, nil),
                row("payload 4097", body: Self.payload(ofSize: 4097), 413, "PayloadTooLarge"),
                row("voip payload 5120", topic: Env.bundle + ".voip", with: [["apns-push-type", "voip"]], body: Self.payload(ofSize: 5120), 200, nil),
                row(
                    "voip payload 5121", topic: Env.bundle + ".voip", with: [["apns-push-type", "voip"]], body: Self.payload(ofSize: 5121),
                    413, "PayloadTooLarge"),
                row("payload is an array", body: "[1,2]", 400, "BadPayload"),
                row("payload is not JSON", body: "hello", 400, "BadPayload"),
            ]
            #expect(Self.payload(ofSize: 4096).utf8.count == 4096)

            let results = try await PythonH2.run(port: simulator.port, [H2Connection(requests: rows.map(\.request))])
            let result = try #require(results.first)
            #expect(result.alpn == "h2")
            for (index, row) in rows.enumerated() {
                let response = try #require(result.response(index), "\(row.name): no answer")
                #expect(response.status == row.status, "\(row.name)")
                #expect(response.reason == row.reason, "\(row.name)")
                #expect(response.headers["apns-id"] != nil, "\(row.name)")
                if row.reason != nil { #expect(response.headers["content-type"]?.hasPrefix("application/json") == true) }
            }
            let counters = simulator.counters()
            #expect(counters.received == rows.count)
            #expect(counters.accepted == rows.filter { $0.status == 200 }.count)
            #expect(counters.count(.duplicateHeaders) == 2)
            #expect(counters.byStatus[413] == 2)
        }
    }

    @Test("provider tokens: garbage, foreign key, unknown kid, wrong team, expired, too-frequent updates")
    func providerTokens() async throws {
        try await Env.withSimulator { simulator in
            let credentials = Env.credentials
            let path = "/3/device/\(Env.deviceToken())"
            func request(_ authorization: String?) -> H2Request {
                var headers = [["apns-topic", Env.bundle]]
                if let authorization { headers.append(["authorization", authorization]) }
                return H2Request(path: path, headers: headers, body: #"{"aps":{}}"#)
            }
            let fresh = try credentials.providerToken()
            let older = try credentials.providerToken(issuedAt: Date().addingTimeInterval(-60))
            let expired = try credentials.providerToken(issuedAt: Date().addingTimeInterval(-2 * 3600))
            let header = Base64URL.encode(#"{"alg":"HS256","kid":"KEY1234567"}"#.utf8)
            let claims = Base64URL.encode("{\"iss\":\"\(Env.teamID)\",\"iat\":\(Int(Date().timeIntervalSince1970))}".utf8)
            let wrongAlgorithm = "\(header).\(claims).\(fresh.split(separator: ".")[2])"

            let connections: [H2Connection] = [
                H2Connection(requests: [request(nil)]),
                H2Connection(requests: [request("bearer not.a.jwt")]),
                H2Connection(requests: [request("basic \(fresh)")]),
                H2Connection(requests: [request("bearer \(try Env.strangerCredentials.providerToken())")]),
                H2Connection(requests: [request("bearer \(try credentials.providerToken(keyID: "KEY0000000"))")]),
                H2Connection(requests: [request("bearer \(try credentials.providerToken(teamID: "OTHERTEAM1"))")]),
                H2Connection(requests: [request("bearer \(wrongAlgorithm)")]),
                H2Connection(requests: [request("bearer \(expired)")]),
                // The same token twice, another one too soon, then the first again.
                H2Connection(
                    requests: [request("bearer \(fresh)"), request("bearer \(fresh)"), request("bearer \(older)"), request("bearer \(fresh)")],
                    sequential: true),
                // An expired token never became the connection's, so replacing it is no update.
                H2Connection(requests: [request("bearer \(expired)"), request("bearer \(fresh)")], sequential: true),
            ]
            let results = try await PythonH2.run(port: simulator.port, connections)
            func answer(_ connection: Int, _ index: Int = 0) -> (Int?, String?) {
                let response = results[connection].response(index)
                return (response?.status, response?.reason)
            }
            #expect(answer(0) == (403, "MissingProviderToken"))
            #expect(answer(1) == (403, "InvalidProviderToken"))
            #expect(answer(2) == (403, "InvalidProviderToken"))
            #expect(answer(3) == (403, "InvalidProviderToken"))
            #expect(answer(4) == (403, "InvalidProviderToken"))
            #expect(answer(5) == (403, "InvalidProviderToken"))
            #expect(answer(6) == (403, "InvalidProviderToken"))
            #expect(answer(7) == (403, "ExpiredProviderToken"))
            #expect(answer(8, 0) == (200, nil))
            #expect(answer(8, 1) == (200, nil))
            #expect(answer(8, 2) == (429, "TooManyProviderTokenUpdates"))
            #expect(answer(8, 3) == (200, nil))
            #expect(answer(9, 0) == (403, "ExpiredProviderToken"))
            #expect(answer(9, 1) == (200, nil))
            #expect(simulator.counters().count(.invalidProviderToken) == 6)
        }
    }
}

@Suite("Simulator faults")
struct SimulatorFaultTests {
    private func alert(_ jwt: String, device: String = Env.deviceToken()) -> H2Request {
        H2Request(path: "/3/device/\(device)", headers: validHeaders(token: jwt), body: #"{"aps":{"alert":"x"}}"#)
    }

    @Test("GOAWAY after N streams: last-stream-id is the N-th stream, later streams are not processed")
    func goawayAfterStreams() async throws {
        try await Env.withSimulator { simulator in
            simulator.setFaults(SimulatorFaults(goawayAfterStreams: 3))
            let jwt = try Env.token()
            let results = try await PythonH2.run(port: simulator.port, [H2Connection(requests: (0..<6).map { _ in alert(jwt) })])
            let result = try #require(results.first)
            let goaway = try #require(result.goaway)
            #expect(result.streamIDs == [1, 3, 5, 7, 9, 11])
            #expect(goaway.lastStreamID == 5)
            #expect(goaway.errorCode == 0)
            #expect(goaway.debugData.contains("Shutdown"))
            for index in 0..<3 { #expect(result.response(index)?.status == 200) }
            for index in 3..<6 {
                let response = result.response(index)
                // Never answered: the GOAWAY says they were not processed.
                #expect(response?.status == nil)
                #expect(response?.reset == nil)
            }
            #expect(result.closed)
            #expect(simulator.counters().goawaysSent == 1)
            #expect(simulator.counters().accepted == 3)
        }
    }

    @Test("GOAWAY after N streams with one request at a time")
    func goawaySequential() async throws {
        try await Env.withSimulator { simulator in
            simulator.setFaults(SimulatorFaults(goawayAfterStreams: 2))
            let jwt = try Env.token()
            let results = try await PythonH2.run(
                port: simulator.port, [H2Connection(requests: (0..<4).map { _ in alert(jwt) }, sequential: true)])
            let result = try #require(results.first)
            #expect(result.goaway?.lastStreamID == 3)
            #expect(result.response(0)?.status == 200)
            #expect(result.response(1)?.status == 200)
            // A third request may cross the GOAWAY on the wire; it is never answered.
            #expect(result.streamIDs.count <= 3)
            if result.streamIDs.count == 3 { #expect(result.response(2)?.status == nil) }
            #expect(result.closed || result.framesAfterGoaway)
            #expect(simulator.counters().accepted == 2)
        }
    }

    @Test("drop after N streams closes the connection without answering the N-th")
    func dropAfterStreams() async throws {
        try await Env.withSimulator { simulator in
            simulator.setFaults(SimulatorFaults(dropAfterStreams: 2))
            let jwt = try Env.token()
            let results = try await PythonH2.run(
                port: simulator.port, [H2Connection(requests: (0..<3).map { _ in alert(jwt) }, sequential: true)])
            let result = try #require(results.first)
            #expect(result.response(0)?.status == 200)
            #expect(result.streamIDs.count == 2)
            #expect(result.response(1)?.status == nil)
            #expect(result.goaway == nil)
            #expect(result.closed)
            #expect(simulator.counters().droppedConnections == 1)
        }
    }

    @Test("SETTINGS_MAX_CONCURRENT_STREAMS is advertised, raised after the first valid token when configured")
    func streamLimit() async throws {
        try await Env.withSimulator({ $0.maxConcurrentStreams = 7 }) { simulator in
            let results = try await PythonH2.run(port: simulator.port, [H2Connection(requests: [])])
            #expect(results.first?.maxConcurrentStreams == [7])
        }
        try await Env.withSimulator({
            $0.maxConcurrentStreams = 50
            $0.maxConcurrentStreamsBeforeFirstToken = 1
        }) { simulator in
            let jwt = try Env.token()
            let results = try await PythonH2.run(
                port: simulator.port, [H2Connection(requests: [alert(jwt), alert(jwt)], sequential: true)])
            let result = try #require(results.first)
            #expect(result.maxConcurrentStreams == [1, 50])
            #expect(result.response(0)?.status == 200)
            #expect(result.response(1)?.status == 200)
        }
        try await Env.withSimulator { simulator in
            simulator.setFaults(SimulatorFaults(maxConcurrentStreams: 3))
            let results = try await PythonH2.run(port: simulator.port, [H2Connection(requests: [])])
            #expect(results.first?.maxConcurrentStreams == [3])
        }
    }

    @Test("a new stream limit reaches open connections as a SETTINGS frame")
    func streamLimitAtRuntime() async throws {
        try await Env.withSimulator { simulator in
            let device = Env.deviceToken()
            simulator.script(token: device, .neverAnswer)
            // The client holds its connection open on an unanswered request while the limit changes.
            async let observed = PythonH2.run(
                port: simulator.port, [H2Connection(requests: [alert(try Env.token(), device: device)])], timeout: 15)
            // Python's start-up takes seconds on a loaded two-core machine: wait for the request
            // itself rather than a fixed time, and only then change the limit.
            let deadline = ContinuousClock.now + .seconds(20)
            while simulator.counters().unanswered == 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(simulator.counters().unanswered == 1)
            simulator.setFaults(SimulatorFaults(maxConcurrentStreams: 5))
            let results = try await observed
            #expect(results.first?.maxConcurrentStreams == [1000, 5])
        }
    }

    @Test("reject-all answers 403 InvalidProviderToken until cleared")
    func rejectAll() async throws {
        try await Env.withSimulator { simulator in
            let jwt = try Env.token()
            simulator.setFaults(SimulatorFaults(rejectAllTokens: .invalidProviderToken))
            let rejected = try await PythonH2.run(port: simulator.port, [H2Connection(requests: [alert(jwt), alert(jwt)])])
            #expect(rejected[0].response(0)?.status == 403)
            #expect(rejected[0].response(0)?.reason == "InvalidProviderToken")
            #expect(rejected[0].response(1)?.reason == "InvalidProviderToken")
            simulator.setFaults(.none)
            let accepted = try await PythonH2.run(port: simulator.port, [H2Connection(requests: [alert(jwt)])])
            #expect(accepted[0].response(0)?.status == 200)
        }
    }

    @Test("fault rates are applied with a seeded generator: same seed, same failures")
    func faultRates() async throws {
        try await Env.withSimulator { simulator in
            let jwt = try Env.token()
            let requests = (0..<40).map { _ in alert(jwt) }
            func run() async throws -> [Int?] {
                let result = try await PythonH2.run(port: simulator.port, [H2Connection(requests: requests, sequential: true)], timeout: 30)[0]
                return (0..<requests.count).map { result.response($0)?.status }
            }
            simulator.setFaults(SimulatorFaults(rate429: 0.2, rate500: 0.2, rate503: 0.2, seed: 7))
            let first = try await run()
            simulator.setFaults(SimulatorFaults(rate429: 0.2, rate500: 0.2, rate503: 0.2, seed: 7))
            let second = try await run()
            #expect(first == second)
            for status in [200, 429, 500, 503] { #expect(first.contains(status), "status \(status)") }

            simulator.setFaults(SimulatorFaults(rate503: 1))
            let all = try await run()
            #expect(all.allSatisfy { $0 == 503 })
            #expect(simulator.counters().count(.serviceUnavailable) >= 40)
        }
    }

    @Test("latency delays every answer")
    func latency() async throws {
        try await Env.withSimulator { simulator in
            simulator.setFaults(SimulatorFaults(latency: .milliseconds(300)))
            let clock = ContinuousClock()
            let start = clock.now
            let answer = try await Curl.send(
                port: simulator.port, path: "/3/device/\(Env.deviceToken())",
                headers: ["authorization: bearer \(try Env.token())", "apns-topic: \(Env.bundle)"], body: #"{"aps":{}}"#)
            #expect(answer.status == 200)
            #expect(clock.now - start >= .milliseconds(300))
        }
    }

    @Test("neverAnswer leaves the stream open until the client gives up")
    func neverAnswer() async throws {
        try await Env.withSimulator { simulator in
            let device = Env.deviceToken()
            simulator.script(token: device, .neverAnswer)
            let results = try await PythonH2.run(
                port: simulator.port, [H2Connection(requests: [alert(try Env.token(), device: device)])], timeout: 5)
            #expect(results[0].response(0)?.status == nil)
            try await waitUntil("the simulator counts the unanswered request") { simulator.counters().unanswered == 1 }
        }
    }
}

@Suite("Simulator credentials")
struct SimulatorCredentialsTests {
    @Test("generate writes PEM files with private keys 0600, and load reads them back")
    func generateAndLoad() async throws {
        let directory = NSTemporaryDirectory() + "apnsw-simulator-credentials-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let generated = try SimulatorCredentials.generate(into: directory, teamID: "TEAMABCDEF", keyID: "KEYABCDEFG")
        #expect(generated.tokenKeyPath.hasSuffix("AuthKey_KEYABCDEFG.p8"))
        let p8 = try String(contentsOfFile: generated.tokenKeyPath, encoding: .utf8)
        #expect(p8.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        for path in [generated.serverKeyPath, generated.clientKeyPath, generated.tokenKeyPath] {
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600, "\(path)")
        }
        for path in [generated.caCertificatePath, generated.serverCertificatePath, generated.clientCertificatePath] {
            #expect(try String(contentsOfFile: path, encoding: .utf8).hasPrefix("-----BEGIN CERTIFICATE-----"))
        }
        // openssl agrees the chain is valid for both names.
        for name in ["-verify_hostname", "-verify_ip"] {
            let result = try await opensslVerifies(
                ca: generated.caCertificatePath, certificate: generated.serverCertificatePath, name: name,
                value: name == "-verify_ip" ? "127.0.0.1" : "localhost")
            #expect(result, "\(name)")
        }
        await #expect(try !opensslVerifies(
            ca: generated.caCertificatePath, certificate: generated.serverCertificatePath, name: "-verify_hostname",
            value: "simulator"))
        let loaded = try SimulatorCredentials.loadOrGenerate(directory: directory, teamID: "TEAMABCDEF", keyID: "KEYABCDEFG")
        #expect(loaded.caCertificatePEM == generated.caCertificatePEM)

        // Extra server names (the compose service name) are in the certificate too.
        let named = try SimulatorCredentials.generate(
            into: directory + "-named", teamID: "TEAMABCDEF", keyID: "KEYABCDEFG", serverNames: ["simulator"])
        defer { try? FileManager.default.removeItem(atPath: directory + "-named") }
        for value in ["simulator", "localhost"] {
            await #expect(try opensslVerifies(
                ca: named.caCertificatePath, certificate: named.serverCertificatePath, name: "-verify_hostname", value: value))
        }

        let validator = RequestValidator(
            configuration: SimulatorConfiguration(tls: loaded.tlsConfiguration(), bundleIDs: ["a"], tokenKeys: [generated.tokenKey]))
        let verified = validator.verifyProviderToken(try loaded.providerToken(), now: Date())
        #expect((try? verified.get()) != nil)
    }
}

/// `openssl verify` of a certificate against a CA for a host name or IP address.
private func opensslVerifies(ca: String, certificate: String, name: String, value: String) async throws -> Bool {
    let result = try await runProcess("/usr/bin/openssl", ["verify", "-CAfile", ca, name, value, certificate])
    return result.status == 0
}
