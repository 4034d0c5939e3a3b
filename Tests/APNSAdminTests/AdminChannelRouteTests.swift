/// The admin API's broadcast channel routes (contract §7) through Hummingbird's router test
/// client, against the simulator's channel management service over TLS + HTTP/2.
@testable import APNSAdmin
import APNSChannelManagement
import APNSConfig
import APNSModel
import APNSSimulator
import APNSTransport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOPosix
import Testing

/// One bundle's channel management client, as `apns-worker run` gives the admin server.
struct SimulatorChannels: BroadcastChannelManaging {
    let bundleID: String
    let port: Int
    let credentials: GeneratedCredentials

    func defaultEnvironment(bundleID: String) -> APNSEnvironment? { bundleID == self.bundleID ? .production : nil }

    func perform(
        _ operation: ChannelOperationRequest, bundleID: String, environment: APNSEnvironment
    ) async throws(ChannelManagementError) -> ChannelManagementResult {
        var configuration = ChannelManagementConfiguration(
            bundleID: bundleID, environment: environment,
            authentication: .token(ProviderTokenSource(teamID: credentials.teamID, keyID: credentials.keyID, key: credentials.tokenPrivateKey)),
            host: "127.0.0.1", port: port)
        configuration.trustRoots = .caFile(credentials.caCertificatePath)
        return try await ChannelManagementClient(configuration: configuration).perform(operation)
    }
}

@Suite struct AdminChannelRouteTests {
    static let bearer: HTTPFields = [.authorization: "Bearer \(AdminHarness.token)"]

    static func json(_ response: TestResponse) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(String(buffer: response.body).utf8)) as? [String: Any])
    }

    /// A simulator with its channel service and an admin server whose channel routes reach it.
    static func with(_ body: (APNSSimulator, AdminService) async throws -> Void) async throws {
        let directory = NSTemporaryDirectory() + "apnsw-admin-channels-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let credentials = try SimulatorCredentials.generate(into: directory, teamID: "TEAM123456", keyID: "KEY1234567")
        var logger = Logger(label: "admin-channels")
        logger.logLevel = .warning
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let simulator = try await APNSSimulator.start(
            SimulatorConfiguration(
                channelPort: 0, tls: credentials.tlsConfiguration(), bundleIDs: ["com.example.app"], tokenKeys: [credentials.tokenKey]),
            logger: logger, eventLoopGroup: group)
        do {
            let admin = try AdminService(
                settings: AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: AdminHarness.token),
                worker: FixedStatus(), queues: nil, prometheus: nil, logger: logger,
                channels: SimulatorChannels(bundleID: "com.example.app", port: simulator.channelPort ?? 0, credentials: credentials))
            try await body(simulator, admin)
        } catch {
            try? await simulator.shutdown()
            try? await group.shutdownGracefully()
            throw error
        }
        try? await simulator.shutdown()
        try? await group.shutdownGracefully()
    }

    @Test func createListShowAndDeleteBehindTheAdminToken() async throws {
        try await Self.with { simulator, admin in
            try await admin.makeApplication().test(.router) { client in
                let base = "/api/bundles/com.example.app/channels"
                // Behind the admin token like every route.
                #expect(try await client.execute(uri: base, method: .get).status == .unauthorized)
                #expect(try await client.execute(uri: base, method: .post).status == .unauthorized)

                let created = try await client.execute(
                    uri: base, method: .post, headers: Self.bearer,
                    body: ByteBuffer(string: #"{"storagePolicy":1,"environment":"production"}"#))
                #expect(created.status == .created)
                let createdJSON = try Self.json(created)
                let channel = try #require(createdJSON["channel"] as? String)
                #expect(createdJSON["storagePolicy"] as? Int == 1)
                #expect(simulator.channels().map(\.id) == [channel])
                let escaped = channel.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? channel

                let list = try await client.execute(uri: base, method: .get, headers: Self.bearer)
                #expect(list.status == .ok)
                #expect(try Self.json(list)["channels"] as? [String] == [channel])

                let shown = try await client.execute(uri: "\(base)/\(escaped)", method: .get, headers: Self.bearer)
                #expect(shown.status == .ok)
                #expect(try Self.json(shown)["storagePolicy"] as? Int == 1)
                #expect(try Self.json(shown)["channel"] as? String == channel)

                let deleted = try await client.execute(uri: "\(base)/\(escaped)", method: .delete, headers: Self.bearer)
                #expect(deleted.status == .noContent)
                #expect(simulator.channels().isEmpty)

                // Apple's refusal as it is: its status, its reason.
                let gone = try await client.execute(uri: "\(base)/\(escaped)", method: .get, headers: Self.bearer)
                #expect(gone.status == .notFound)
                #expect(try Self.json(gone)["reason"] as? String == "ChannelNotRegistered")
                #expect(try Self.json(gone)["status"] as? Int == 404)
            }
        }
    }

    /// Apple refusing the worker's provider token is an upstream failure (502 with
    /// Apple's status and reason), never the admin's own 403, which would send the operator
    /// looking at the admin token.
    @Test func applesRefusalOfTheWorkersCredentialsIsABadGatewayNotTheAdminsOwn403() async throws {
        try await Self.with { simulator, admin in
            simulator.setFaults(SimulatorFaults(rejectAllTokens: .invalidProviderToken))
            try await admin.makeApplication().test(.router) { client in
                let base = "/api/bundles/com.example.app/channels"
                for (uri, method) in [(base, HTTPRequest.Method.get), (base, .post), (base + "/dHN0LXNyY2gtY2hubA==", .delete)] {
                    let response = try await client.execute(uri: uri, method: method, headers: Self.bearer)
                    #expect(response.status == .badGateway, "\(method) \(uri)")
                    let json = try Self.json(response)
                    #expect(json["status"] as? Int == 403)
                    #expect(json["reason"] as? String == "InvalidProviderToken")
                    #expect((json["error"] as? String)?.contains("refused the worker's credentials") == true)
                }
                #expect(simulator.counters().channelRequests > 0, "Apple was asked")
            }
        }
    }

    @Test(arguments: [
        (401, HTTPResponse.Status.badGateway), (403, .badGateway), (407, .badGateway), (500, .badGateway), (503, .badGateway),
        (0, .badGateway), (400, .badRequest), (404, .notFound), (410, .gone), (429, .tooManyRequests),
    ])
    func whichOfApplesStatusesTheAdminPassesOn(_ apple: Int, _ admin: HTTPResponse.Status) {
        let (status, body) = AdminChannelRoutes.refusal(ChannelManagementError(status: apple, reason: "Reason"))
        #expect(status == admin)
        #expect(body.status == apple && body.reason == "Reason")
        #expect((body.error == nil) == (status.code == apple))
    }

    @Test func badRequestsAreRefusedWithoutCallingApple() async throws {
        try await Self.with { simulator, admin in
            try await admin.makeApplication().test(.router) { client in
                let base = "/api/bundles/com.example.app/channels"
                let policy = try await client.execute(
                    uri: base, method: .post, headers: Self.bearer, body: ByteBuffer(string: #"{"storagePolicy":3}"#))
                #expect(policy.status == .badRequest)
                let notJSON = try await client.execute(uri: base, method: .post, headers: Self.bearer, body: ByteBuffer(string: "x"))
                #expect(notJSON.status == .badRequest)
                let environment = try await client.execute(uri: base + "?environment=staging", method: .get, headers: Self.bearer)
                #expect(environment.status == .badRequest)
                let channel = try await client.execute(uri: base + "/not%20base64", method: .get, headers: Self.bearer)
                #expect(channel.status == .badRequest)
                let bundle = try await client.execute(uri: "/api/bundles/com.example.other/channels", method: .get, headers: Self.bearer)
                #expect(bundle.status == .notFound)
                #expect(simulator.counters().channelRequests == 0)
            }
        }
    }
}
