/// The admin API's broadcast channel routes (contract §7), behind the admin token like every
/// other route: `GET` and `POST /api/bundles/{b}/channels`, `GET` and `DELETE
/// /api/bundles/{b}/channels/{id}`. The work is Apple's channel management service, reached
/// through whatever `BroadcastChannelManaging` the worker was given (`apns-worker run` builds one
/// client per bundle from the configuration). Apple's refusals of the request come back as they
/// are: Apple's 4xx status with `{"status","reason"}`. Apple refusing the worker's own
/// credentials (401, 403, 407) or failing itself (5xx) is 502 with the same shape plus `error`:
/// passed through, it would read as the admin's own authentication failing, or the admin being
/// busy. A service that cannot be reached is 502 as well. A request the bundle's token
/// key cannot sign for (`keyEnvironment`, `keyTopics`) is not sent: the answer Apple would give,
/// mapped the same way, with `error` saying why.
import APNSChannelManagement
import APNSModel
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Channel management for the admin routes: one request to Apple's service per call.
public protocol BroadcastChannelManaging: Sendable {
    /// The bundle's default environment; nil when the bundle is not configured for HTTP/2 (no
    /// broadcast channels without it).
    func defaultEnvironment(bundleID: String) -> APNSEnvironment?
    func perform(
        _ operation: ChannelOperationRequest, bundleID: String, environment: APNSEnvironment
    ) async throws(ChannelManagementError) -> ChannelManagementResult
}

struct AdminChannelRoutes: Sendable {
    let channels: any BroadcastChannelManaging

    /// The POST body: `{"storagePolicy":0|1,"environment":…}`, both optional.
    struct CreateBody: Decodable {
        var storagePolicy: Int?
        var environment: String?
    }

    /// One channel, as create answers it (201) and show returns it.
    struct Channel: Encodable {
        var channel: String
        var bundleId: String
        var environment: String
        var storagePolicy: Int
    }

    struct Listed: Encodable {
        var bundleId: String
        var environment: String
        var channels: [String]
    }

    struct AppleError: Encodable {
        var status: Int
        var reason: String
        /// Set when the admin's status is not Apple's: what went wrong upstream.
        var error: String?
    }

    /// The admin's answer to Apple's refusal (or an unreachable service, status 0): Apple's
    /// status for a 4xx about the request, 502 for anything about the worker's credentials,
    /// Apple's own failures and no answer at all.
    static func refusal(_ error: ChannelManagementError) -> (HTTPResponse.Status, AppleError) {
        // Not sent (the bundle's key cannot sign for it): Apple's answer-to-be, with why.
        if let notSent = error.notSent {
            let status: HTTPResponse.Status = (400...499).contains(error.status) && ![401, 403, 407].contains(error.status)
                ? HTTPResponse.Status(code: error.status) : .badGateway
            return (status, AppleError(status: error.status, reason: error.reason, error: "\(notSent); not sent to Apple, which would refuse it"))
        }
        switch error.status {
        case 401, 403, 407:
            return (.badGateway, AppleError(
                status: error.status, reason: error.reason,
                error: "Apple's channel management service refused the worker's credentials for this bundle (\(error.status) \(error.reason))"))
        case 400...499:
            return (HTTPResponse.Status(code: error.status), AppleError(status: error.status, reason: error.reason, error: nil))
        case 500...599:
            return (.badGateway, AppleError(
                status: error.status, reason: error.reason, error: "Apple's channel management service failed (\(error.status) \(error.reason))"))
        default:
            return (.badGateway, AppleError(status: error.status, reason: error.reason, error: "Apple's channel management service could not be reached"))
        }
    }

    /// Larger create bodies are refused unread.
    static let maximumBody = 4096

    func register(on router: Router<BasicRequestContext>) {
        router.get("/api/bundles/:bundleId/channels") { request, context -> Response in
            let (bundleID, environment) = try target(request, context, bodyEnvironment: nil)
            return await answer(.list, bundleID: bundleID, environment: environment) { result in
                guard case .channels(let list) = result else { return nil }
                return AdminRoutes.json(Listed(bundleId: bundleID, environment: environment.rawValue, channels: list.map(\.id)))
            }
        }
        router.post("/api/bundles/:bundleId/channels") { request, context -> Response in
            let bytes = try await request.body.collect(upTo: Self.maximumBody)
            let body: CreateBody
            if bytes.readableBytes == 0 {
                body = CreateBody()
            } else {
                do { body = try JSONDecoder().decode(CreateBody.self, from: Data(bytes.readableBytesView)) } catch {
                    throw HTTPError(.badRequest, message: "the body must be JSON: {\"storagePolicy\":0|1,\"environment\":\"production\"|\"sandbox\"}")
                }
            }
            let policyValue = body.storagePolicy ?? ChannelStoragePolicy.noMessageStored.rawValue
            guard let policy = ChannelStoragePolicy(rawValue: policyValue) else {
                throw HTTPError(.badRequest, message: "storagePolicy must be 0 (no message stored) or 1 (most recent message stored)")
            }
            let (bundleID, environment) = try target(request, context, bodyEnvironment: body.environment)
            return await answer(.create(storagePolicy: policy), bundleID: bundleID, environment: environment) { result in
                guard case .created(let channel) = result else { return nil }
                return AdminRoutes.json(
                    Channel(channel: channel.id, bundleId: bundleID, environment: environment.rawValue, storagePolicy: policy.rawValue),
                    status: .created)
            }
        }
        router.get("/api/bundles/:bundleId/channels/:channel") { request, context -> Response in
            let (bundleID, environment) = try target(request, context, bodyEnvironment: nil)
            let channel = try Self.channel(context)
            return await answer(.read(channel), bundleID: bundleID, environment: environment) { result in
                guard case .channel(let shown, let policy) = result else { return nil }
                return AdminRoutes.json(
                    Channel(channel: shown.id, bundleId: bundleID, environment: environment.rawValue, storagePolicy: policy.rawValue))
            }
        }
        router.delete("/api/bundles/:bundleId/channels/:channel") { request, context -> Response in
            let (bundleID, environment) = try target(request, context, bodyEnvironment: nil)
            let channel = try Self.channel(context)
            return await answer(.delete(channel), bundleID: bundleID, environment: environment) { result in
                guard case .deleted = result else { return nil }
                return Response(status: .noContent)
            }
        }
    }

    /// The bundle of the path and the environment (`?environment=`, the body's, or the bundle's).
    private func target(
        _ request: Request, _ context: BasicRequestContext, bodyEnvironment: String?
    ) throws -> (String, APNSEnvironment) {
        let bundleID = try AdminRegistryRoutes.parameter(context, "bundleId")
        guard let defaultEnvironment = channels.defaultEnvironment(bundleID: bundleID) else {
            throw HTTPError(.notFound, message: "no HTTP/2 bundle \(Self.printable(bundleID)) is configured (broadcast needs HTTP/2)")
        }
        guard let name = bodyEnvironment ?? request.uri.queryParameters.get("environment") else { return (bundleID, defaultEnvironment) }
        guard let environment = APNSEnvironment(rawValue: name) else {
            throw HTTPError(.badRequest, message: "environment must be production or sandbox")
        }
        return (bundleID, environment)
    }

    private static func channel(_ context: BasicRequestContext) throws -> BroadcastChannel {
        let raw = try AdminRegistryRoutes.parameter(context, "channel")
        if let problem = BroadcastChannel.problem(raw) { throw HTTPError(.badRequest, message: "channel \(problem)") }
        guard let channel = BroadcastChannel(id: raw) else { throw HTTPError(.badRequest, message: "not a channel id") }
        return channel
    }

    /// Runs the operation; Apple's refusal as Apple's status, an unreachable service as 502.
    private func answer(
        _ operation: ChannelOperationRequest, bundleID: String, environment: APNSEnvironment,
        _ success: (ChannelManagementResult) -> Response?
    ) async -> Response {
        do {
            let result = try await channels.perform(operation, bundleID: bundleID, environment: environment)
            return success(result) ?? AdminRoutes.error(.badGateway, "the channel management service answered out of turn")
        } catch {
            let (status, body) = Self.refusal(error)
            return AdminRoutes.json(body, status: status)
        }
    }

    /// A value quoted in an error: at most 80 characters, control characters replaced.
    static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.prefix(80).map { $0.value < 0x20 || $0.value == 0x7F ? "?" : $0 }))
    }
}
