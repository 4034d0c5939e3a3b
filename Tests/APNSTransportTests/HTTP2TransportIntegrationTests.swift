/// `HTTP2Transport` against the real simulator over TLS on loopback: every answer Apple gives,
/// provider token renewal, request deadlines, GOAWAY, dropped connections, the server's stream
/// limit, certificate authentication and connection reuse.
import APNSModel
import APNSSimulator
import APNSTransport
import Foundation
import Testing
import TestSupport

private typealias Env = HTTP2Integration

// One at a time: in parallel, a thousand-stream test starves the others' connection setup on a
// two-core machine and their short deadlines measure the load instead of the transport.
@Suite("HTTP2Transport against the simulator", .serialized)
struct HTTP2TransportIntegrationTests {
    @Test("200: the apns-id is echoed and the simulator records the notification under it")
    func accepted() async throws {
        try await Env.withTransport { simulator, transport in
            let notification = Env.notification()
            let answer = try #require(await transport.send(notification).answer)
            #expect(answer.status == 200)
            #expect(answer.reason == nil)
            #expect(answer.apnsID == notification.id)
            let record = try #require(simulator.accepted().first)
            #expect(UUID(uuidString: record.apnsID) == notification.id)
            #expect(record.token == notification.token?.hex)
            #expect(record.topic == Env.bundle)
            #expect(record.payload == notification.payload)
            #expect(record.authentication == .token(keyID: Env.credentials.keyID, teamID: Env.credentials.teamID))
        }
    }

    @Test("410 Unregistered carries Apple's timestamp")
    func unregistered() async throws {
        try await Env.withTransport { simulator, transport in
            let device = SimulatorTestEnvironment.deviceToken()
            simulator.script(token: device, .unregistered(timestamp: 1_700_000_000_123))
            let notification = Env.notification(token: device)
            let answer = try #require(await transport.send(notification).answer)
            #expect(answer.status == 410)
            #expect(answer.reason == .unregistered)
            #expect(answer.timestamp == 1_700_000_000_123)
            #expect(answer.apnsID == notification.id)
        }
    }

    @Test("400 BadDeviceToken")
    func badDeviceToken() async throws {
        try await Env.withTransport { simulator, transport in
            let device = SimulatorTestEnvironment.deviceToken()
            simulator.script(token: device, .badDeviceToken)
            let answer = try #require(await transport.send(Env.notification(token: device)).answer)
            #expect(answer.status == 400)
            #expect(answer.reason == .badDeviceToken)
            #expect(answer.timestamp == nil)
        }
    }

    @Test("413 PayloadTooLarge for an alert payload over 4 KB")
    func payloadTooLarge() async throws {
        try await Env.withTransport { simulator, transport in
            let payload = #"{"aps":{"alert":""# + String(repeating: "x", count: 5000) + #""}}"#
            let answer = try #require(await transport.send(Env.notification(payload: payload)).answer)
            #expect(answer.status == 413)
            #expect(answer.reason == .payloadTooLarge)
            #expect(simulator.counters().count(.payloadTooLarge) == 1)
        }
    }

    @Test("403 InvalidProviderToken when the key is revoked, answered once and not retried")
    func invalidProviderToken() async throws {
        try await Env.withTransport { simulator, transport in
            simulator.setFaults(SimulatorFaults(rejectAllTokens: .invalidProviderToken))
            let answer = try #require(await transport.send(Env.notification()).answer)
            #expect(answer.status == 403)
            #expect(answer.reason == .invalidProviderToken)
            #expect(simulator.counters().received == 1)
        }
    }

    @Test("403 ExpiredProviderToken: the token is renewed and the notification sent once more")
    func expiredProviderTokenRenewed() async throws {
        // The first token is signed two hours in the past, as after a long suspension.
        let clock = HTTP2IntegrationClock(staleReadings: 1, offset: -2 * 3600)
        let tokens = Env.tokenSource(now: { clock.now() })
        try await Env.withTransport(authentication: .token(tokens)) { simulator, transport in
            // With a connection ready, the request is written at once and meets the refusal on
            // the event loop; the renewed attempt starts from there, on the same path.
            try await waitUntil("a ready connection") { transport.connectionStates()[.ready] == 1 }
            let notification = Env.notification()
            let answer = try #require(await transport.send(notification).answer)
            #expect(answer.status == 200)
            #expect(answer.apnsID == notification.id)
            #expect(tokens.renewals == 2)
            let counters = simulator.counters()
            #expect(counters.count(.expiredProviderToken) == 1)
            #expect(counters.received == 2)
            #expect(counters.accepted == 1)
        }
    }

    @Test("429, 500 and 503 come back as answers for the worker to classify")
    func throttledAndServerErrors() async throws {
        try await Env.withTransport { simulator, transport in
            let rows: [(Int, APNSReason)] = [(429, .tooManyRequests), (500, .internalServerError), (503, .serviceUnavailable)]
            for (status, reason) in rows {
                let device = SimulatorTestEnvironment.deviceToken()
                simulator.script(token: device, .always(status: status, reason: reason))
                let answer = try #require(await transport.send(Env.notification(token: device)).answer)
                #expect(answer.status == status)
                #expect(answer.reason == reason)
            }
            // A failFirst token: the transport itself does not retry, so the first send sees 503.
            let flaky = SimulatorTestEnvironment.deviceToken()
            simulator.script(token: flaky, .failFirst(1, status: 503, reason: .serviceUnavailable))
            #expect(await transport.send(Env.notification(token: flaky)).answer?.status == 503)
            #expect(await transport.send(Env.notification(token: flaky)).answer?.status == 200)
        }
    }

    @Test("an unanswered request fails with .timeout at its deadline and frees its stream")
    func requestDeadline() async throws {
        try await Env.withTransport(transport: { $0.requestTimeout = .seconds(1) }) { simulator, transport in
            // The first answer raises the one-stream limit of token authentication. The deadline
            // also covers the first connect, which a loaded machine can stretch past it: try again.
            try await waitUntil("a first answer") { await transport.send(Env.notification()).isAccepted }
            let silent = SimulatorTestEnvironment.deviceToken()
            simulator.script(token: silent, .neverAnswer)
            let started = ContinuousClock.now
            let result = await transport.send(Env.notification(token: silent))
            let elapsed = started.duration(to: .now)
            #expect(result == .failed(.timeout))
            #expect(elapsed >= .milliseconds(950))
            #expect(elapsed < .seconds(60), "at its deadline, not at the 120 s default (a loaded machine stalls this process for seconds)")
            try await waitUntil("the simulator counts the unanswered request") { simulator.counters().unanswered == 1 }
            // The same connection still serves.
            try await waitUntil("an answer after the timeout") { await transport.send(Env.notification()).isAccepted }
            #expect(simulator.counters().connections == 1)
        }
    }

    @Test("a notification that waits for a stream that never comes fails with .timeout at its deadline")
    func waitingForAStreamTimesOut() async throws {
        // Nothing listens on port 1: connecting fails again and again, no stream is ever free,
        // and every send waits in the pool's queue, as a closure, until its deadline.
        try await Env.withTransport(transport: { $0.port = 1; $0.requestTimeout = .seconds(1) }) { _, transport in
            let started = ContinuousClock.now
            let results = await Env.sendAll((0..<20).map { _ in Env.notification() }, through: transport)
            let elapsed = started.duration(to: .now)
            #expect(results.allSatisfy { $0 == .failed(.timeout) }, "\(results)")
            #expect(elapsed >= .milliseconds(950))
            #expect(elapsed < .seconds(60), "at their deadline, not at the 120 s default (a loaded machine stalls this process for seconds)")
        }
    }

    @Test("GOAWAY after N streams: every notification still gets 200, unprocessed ones on a fresh connection")
    func goaway() async throws {
        // The environment's generous deadline: this test is about resending, and a loaded CI
        // machine must not turn a slow reconnect into a timeout.
        try await Env.withTransport { simulator, transport in
            #expect(await transport.send(Env.notification()).isAccepted)
            simulator.setFaults(SimulatorFaults(goawayAfterStreams: 10))
            let notifications = (0..<60).map { _ in Env.notification() }
            let results = await Env.sendAll(notifications, through: transport)
            #expect(results.allSatisfy { $0.isAccepted }, "\(results.filter { !$0.isAccepted })")
            let counters = simulator.counters()
            #expect(counters.goawaysSent >= 1)
            #expect(counters.connections > 1)
            // Nothing was delivered twice: the resent ones had not been processed.
            #expect(counters.accepted == 61)
            let ids = Set(simulator.accepted().map { $0.apnsID.lowercased() })
            #expect(ids.isSuperset(of: notifications.map { $0.id.uuidString.lowercased() }))
        }
    }

    @Test("an abrupt drop fails the streams in flight with .connectionLost; later sends use a new connection")
    func droppedConnection() async throws {
        try await Env.withTransport { simulator, transport in
            #expect(await transport.send(Env.notification()).isAccepted)
            simulator.setFaults(SimulatorFaults(latency: .milliseconds(50), dropAfterStreams: 5))
            let results = await Env.sendAll((0..<20).map { _ in Env.notification() }, through: transport)
            let lost = results.filter {
                if case .failed(.connectionLost) = $0 { return true }
                return false
            }
            #expect(!lost.isEmpty)
            #expect(results.allSatisfy { $0.isAccepted || lost.contains($0) }, "\(results)")
            #expect(simulator.counters().droppedConnections >= 1)

            simulator.setFaults(.none)
            let later = await Env.sendAll((0..<10).map { _ in Env.notification() }, through: transport)
            #expect(later.allSatisfy { $0.isAccepted }, "\(later)")
            #expect(simulator.counters().connections >= 2)
        }
    }

    @Test("the server's limit of 5 concurrent streams holds with 200 sends at once, all answered")
    func streamLimit() async throws {
        let latency = Duration.milliseconds(20)
        // 200 sends through 5 streams queue for 40 rounds, each waiting counted in its deadline.
        try await Env.withTransport(simulator: { $0.maxConcurrentStreams = 5 }) { simulator, transport in
            simulator.setFaults(SimulatorFaults(latency: latency))
            let started = ContinuousClock.now
            let results = await Env.sendAll((0..<200).map { _ in Env.notification() }, through: transport)
            let elapsed = started.duration(to: .now)
            #expect(results.allSatisfy { $0.isAccepted })
            #expect(simulator.counters().accepted == 200)
            #expect(simulator.counters().connections == 1)
            // Each stream is open at least `latency` after the simulator read it: six requests read
            // within less than `latency` of each other would mean six streams at once.
            let seconds = Double(latency.components.attoseconds) / 1e18
            let received = simulator.accepted().map(\.receivedAt).sorted()
            let crowded = zip(received, received.dropFirst(5)).filter { $1.timeIntervalSince($0) < seconds * 0.9 }
            #expect(crowded.isEmpty, "\(crowded.count) windows with more than 5 streams")
            #expect(elapsed >= latency * 36)
        }
    }

    @Test("certificate authentication: client.pem and client.key, no provider token")
    func certificateAuthentication() async throws {
        let credentials = Env.credentials
        try await Env.withTransport(
            authentication: .certificate(certFile: credentials.clientCertificatePath, keyFile: credentials.clientKeyPath)
        ) { simulator, transport in
            let results = await Env.sendAll((0..<10).map { _ in Env.notification() }, through: transport)
            #expect(results.allSatisfy { $0.isAccepted })
            let accepted = simulator.accepted()
            #expect(accepted.count == 10)
            #expect(accepted.allSatisfy { $0.authentication == .certificate })
        }
    }

    @Test("connectOnFirstUse: no connection until the first notification, then a persistent one")
    func connectOnFirstUse() async throws {
        try await Env.withTransport(transport: {
            $0.connections = 2
            $0.connectOnFirstUse = true
        }) { simulator, transport in
            // A control transport without the flag, started after this one: once it is
            // connected, this one has had every chance to connect too, had it not waited.
            let controlTransport = try HTTP2Transport(configuration: Env.configuration(port: simulator.port), logger: Env.logger)
            let controlRun = Task { try await controlTransport.run() }
            defer { controlRun.cancel() }
            try await waitUntil("the control transport connected") { controlTransport.connectionStates()[.ready] == 1 }
            try await Task.sleep(for: .milliseconds(200))
            #expect(simulator.counters().openConnections == 1, "only the control's")
            #expect(transport.connectionStates()[.idle] == 2)
            #expect(await transport.send(Env.notification()).isAccepted)
            try await waitUntil("both connections up") { transport.connectionStates()[.ready] == 2 }
            #expect(transport.connectionStates()[.idle] == 0)
            #expect(simulator.counters().openConnections == 3)
        }
    }

    @Test("connection reuse: 1000 notifications over 1 and over 4 connections open exactly that many", arguments: [1, 4])
    func connectionReuse(connections: Int) async throws {
        // The environment's generous deadlines: a debug build on a busy machine answers a
        // thousand at once slowly, and a timed-out connect would (rightly) open a replacement.
        try await Env.withTransport(transport: {
            $0.connections = connections
        }) { simulator, transport in
            let results = await Env.sendAll((0..<1000).map { _ in Env.notification() }, through: transport)
            #expect(results.allSatisfy { $0.isAccepted })
            let counters = simulator.counters()
            #expect(counters.accepted == 1000)
            #expect(counters.connections == connections)
            #expect(counters.openConnections == connections)
        }
    }
}
