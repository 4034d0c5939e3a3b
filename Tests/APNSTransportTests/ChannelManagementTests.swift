/// Apple's channel management service (contract §7) between the channel management client and the
/// simulator, over TLS + HTTP/2 on loopback; the simulator's channel book on its own (pure); and
/// `apns-worker channels` as operators run it.
import APNSChannelManagement
import APNSModel
import APNSOutcome
import APNSTransport
import Foundation
import Testing
import TestSupport

@testable import APNSSimulator

@Suite(.serialized) struct ChannelManagementTests {
    static func client(
        _ simulator: APNSSimulator, bundleID: String = SimulatorTestEnvironment.bundle,
        credentials: GeneratedCredentials = SimulatorTestEnvironment.credentials
    ) throws -> ChannelManagementClient {
        let port: Int = try #require(simulator.channelPort)
        var configuration = ChannelManagementConfiguration(
            bundleID: bundleID, environment: .sandbox,
            authentication: .token(
                ProviderTokenSource(teamID: credentials.teamID, keyID: credentials.keyID, key: credentials.tokenPrivateKey)),
            host: "127.0.0.1", port: port)
        configuration.trustRoots = .caFile(SimulatorTestEnvironment.credentials.caCertificatePath)
        return ChannelManagementClient(configuration: configuration)
    }

    @Test func createReadListAndDeleteAsAppleDocumentsThem() async throws {
        try await SimulatorTestEnvironment.withSimulator({ $0.channelPort = 0 }) { simulator in
            let client = try Self.client(simulator)
            let kept: BroadcastChannel
            do throws(ChannelManagementError) { kept = try await client.create(storagePolicy: .mostRecentMessageStored) } catch {
                Issue.record("first create: \(error); \(simulator.counters())")
                throw error
            }
            let fleeting: BroadcastChannel
            do throws(ChannelManagementError) { fleeting = try await client.create(storagePolicy: .noMessageStored) } catch {
                Issue.record("second create: \(error); \(simulator.counters())")
                throw error
            }
            // Base64 of 16 bytes, as Apple's ids.
            #expect(Data(base64Encoded: kept.id)?.count == 16)
            #expect(try await client.read(kept) == .mostRecentMessageStored)
            #expect(try await client.read(fleeting) == .noMessageStored)
            #expect(Set(try await client.list()) == [kept, fleeting])
            try await client.delete(kept)
            #expect(try await client.list() == [fleeting])
            do throws(ChannelManagementError) {
                _ = try await client.read(kept)
                Issue.record("a deleted channel was read")
            } catch {
                #expect(error == ChannelManagementError(status: 404, reason: "ChannelNotRegistered"))
            }
            do throws(ChannelManagementError) {
                try await client.delete(kept)
                Issue.record("a deleted channel was deleted again")
            } catch {
                #expect(error.status == 404 && error.reason == "ChannelNotRegistered")
            }
            #expect(simulator.counters().channelRequests == 9)
            // Another bundle does not see this one's channels.
            #expect(try await Self.client(simulator, bundleID: SimulatorTestEnvironment.legacyBundle).list().isEmpty)
        }
    }

    @Test func applesRefusalsComeBackAsTheyAre() async throws {
        try await SimulatorTestEnvironment.withSimulator({ $0.channelPort = 0 }) { simulator in
            let other = try Self.client(simulator, bundleID: "com.example.other")
            let stranger = try Self.client(simulator, credentials: SimulatorTestEnvironment.strangerCredentials)
            do throws(ChannelManagementError) {
                _ = try await other.list()
                Issue.record("a bundle the simulator does not serve was listed")
            } catch {
                #expect(error == ChannelManagementError(status: 400, reason: "TopicDisallowed"))
            }
            do throws(ChannelManagementError) {
                _ = try await stranger.list()
                Issue.record("a stranger's key was accepted")
            } catch {
                #expect(error == ChannelManagementError(status: 403, reason: "InvalidProviderToken"))
                #expect(error.description == "APNs answered 403 InvalidProviderToken")
            }
        }
    }

    @Test func anUnreachableServiceIsOneLineWithoutAStatus() async throws {
        var configuration = ChannelManagementConfiguration(
            bundleID: "com.example.app", environment: .production,
            authentication: .token(
                ProviderTokenSource(
                    teamID: SimulatorTestEnvironment.teamID, keyID: SimulatorTestEnvironment.keyID,
                    key: SimulatorTestEnvironment.credentials.tokenPrivateKey)),
            host: "127.0.0.1", port: 1)
        configuration.timeout = .seconds(10)
        do throws(ChannelManagementError) {
            _ = try await ChannelManagementClient(configuration: configuration).list()
            Issue.record("port 1 answered")
        } catch {
            #expect(error.status == 0)
            #expect(error.reason.contains("cannot reach the channel management service at 127.0.0.1:1"))
        }
    }

    @Test func applesHostsAndPortsPerEnvironment() {
        let production = ChannelManagementConfiguration(
            bundleID: "b", environment: .production, authentication: .certificate(certFile: "c", keyFile: "k"))
        #expect(production.host == "api-manage-broadcast.push.apple.com" && production.port == 2196)
        let sandbox = ChannelManagementConfiguration(
            bundleID: "b", environment: .sandbox, authentication: .certificate(certFile: "c", keyFile: "k"))
        #expect(sandbox.host == "api-manage-broadcast.sandbox.push.apple.com" && sandbox.port == 2195)
    }

    // MARK: the simulator's rules, without sockets

    @Test func theChannelLimitIsTenThousandPerBundle() {
        var book = ChannelBook()
        var next = 0
        func makeID() -> String {
            next += 1
            return Data(withUnsafeBytes(of: next.bigEndian) { Array($0) }).base64EncodedString()
        }
        for _ in 0..<AppleChannelRules.channelLimit {
            guard case .created = book.create(bundleID: "a", storagePolicy: 0, makeID: makeID) else {
                Issue.record("refused below the limit")
                return
            }
        }
        let beyond = book.create(bundleID: "a", storagePolicy: 0, makeID: makeID)
        #expect(beyond == .limitReached)
        // Per bundle: another bundle still has room, and a deletion makes room again.
        guard case .created(let other) = book.create(bundleID: "b", storagePolicy: 1, makeID: makeID) else {
            Issue.record("another bundle was refused")
            return
        }
        #expect(book.channel(other, bundleID: "b")?.storagePolicy == 1)
        #expect(book.channel(other, bundleID: "a") == nil)
        let first = book.list(bundleID: "a")[0]
        let removed = book.delete(first, bundleID: "a")
        #expect(removed)
        guard case .created = book.create(bundleID: "a", storagePolicy: 0, makeID: makeID) else {
            Issue.record("no room after a deletion")
            return
        }
        // A deleted channel receives nothing, and its id is never issued again.
        let counted = book.received(first, bundleID: "a", payload: [])
        #expect(!counted)
        #expect(book.deleted.contains(first))
    }

    @Test func createBodiesFollowApplesFields() {
        #expect(SimulatorEngine.createBody(Array(#"{"message-storage-policy":1,"push-type":"LiveActivity"}"#.utf8)) == .success(1))
        #expect(SimulatorEngine.createBody(Array(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#.utf8)) == .success(0))
        #expect(SimulatorEngine.createBody(Array(#"{"message-storage-policy":0}"#.utf8)) == .failure(Rejection(400, .missingPushType)))
        #expect(
            SimulatorEngine.createBody(Array(#"{"message-storage-policy":0,"push-type":"alert"}"#.utf8))
                == .failure(Rejection(400, .invalidPushType)))
        for bad in [#"{"message-storage-policy":2,"push-type":"LiveActivity"}"#, #"{"message-storage-policy":true,"push-type":"LiveActivity"}"#, "nope"] {
            #expect(SimulatorEngine.createBody(Array(bad.utf8)) == .failure(Rejection(400, SimulatorEngine.badMessageStoragePolicy)))
        }
    }

    @Test func routesAreApplesPaths() {
        #expect(ChannelOperation.route(method: "POST", path: "/1/apps/com.a/channels") == .success(.create(bundleID: "com.a")))
        #expect(ChannelOperation.route(method: "GET", path: "/1/apps/com.a/channels") == .success(.read(bundleID: "com.a")))
        #expect(ChannelOperation.route(method: "DELETE", path: "/1/apps/com.a/channels") == .success(.delete(bundleID: "com.a")))
        #expect(ChannelOperation.route(method: "GET", path: "/1/apps/com.a/all-channels") == .success(.list(bundleID: "com.a")))
        #expect(ChannelOperation.route(method: "PUT", path: "/1/apps/com.a/channels") == .failure(Rejection(405, .methodNotAllowed)))
        #expect(ChannelOperation.route(method: "POST", path: "/1/apps/com.a/all-channels") == .failure(Rejection(405, .methodNotAllowed)))
        for path in ["/2/apps/com.a/channels", "/1/apps//channels", "/1/apps/com.a/channels/x", "/1/apps/co m/channels"] {
            #expect(ChannelOperation.route(method: "GET", path: path) == .failure(Rejection(404, .badPath)))
        }
    }
}

/// Broadcasts through the HTTP/2 transport against the simulator: Apple's broadcast rules.
@Suite struct BroadcastIntegrationTests {
    static func broadcast(_ channel: String, payload: String = #"{"aps":{"event":"update","content-state":{}}}"#) -> PushNotification {
        PushNotification(
            id: UUID(), target: .channel(BroadcastChannel(id: channel)!), topic: HTTP2Integration.bundle, pushType: .liveactivity,
            priority: 10, expiration: 0, collapseID: nil, payload: Array(payload.utf8), environment: .production)
    }

    @Test func aBroadcastReachesItsChannelAndAnUnknownChannelIsNotRegistered() async throws {
        try await HTTP2Integration.withTransport(simulator: { $0.channelPort = 0 }) { simulator, transport in
            let client = try ChannelManagementTests.client(simulator)
            let channel = try await client.create(storagePolicy: .noMessageStored)
            let notification = Self.broadcast(channel.id)
            let answer = try #require(await transport.send(notification).answer)
            #expect(answer.status == 200)
            #expect(answer.apnsID == notification.id)
            #expect(simulator.channels().first { $0.id == channel.id }?.received == 1)
            #expect(simulator.channels().first?.lastPayload == notification.payload)
            #expect(simulator.counters().broadcastsAccepted == 1)

            let unknown = try #require(await transport.send(Self.broadcast("AAAAAAAAAAAAAAAAAAAAAA==")).answer)
            #expect(unknown.status == 404 && unknown.reason == .channelNotRegistered)
            try await client.delete(channel)
            let deleted = try #require(await transport.send(Self.broadcast(channel.id)).answer)
            #expect(deleted.status == 404 && deleted.reason == .channelNotRegistered)
            #expect(OutcomeClassifier.classify(deleted) == .invalidToken(reason: "ChannelNotRegistered", timestamp: nil))

            // Apple's limit for a broadcast payload is 5120 bytes.
            let channel2 = try await client.create(storagePolicy: .noMessageStored)
            let filler = String(repeating: "a", count: 5120 - 16)
            let fits = try #require(await transport.send(Self.broadcast(channel2.id, payload: #"{"aps":{"x":"\#(filler)"}}"#)).answer)
            #expect(fits.status == 200)
            let big = try #require(await transport.send(Self.broadcast(channel2.id, payload: #"{"aps":{"x":"\#(filler)a"}}"#)).answer)
            #expect(big.status == 413 && big.reason == .payloadTooLarge)
            // Device notifications share the connection meanwhile.
            #expect(try #require(await transport.send(HTTP2Integration.notification()).answer).status == 200)
        }
    }
}
