/// The registry's admin routes (contract §6), present when the worker has a `[registry]`:
/// `GET /api/registry/groups/{group}`, `GET /api/registry/devices/{bundleId}/{token}`, and
/// `GET /api/registry/summary` (devices per bundle and the last 48 hours of counts, for the page).
/// Behind the admin token like every other route; tokens are shown whole here (never in logs).
/// A group, bundle ID or token that contract §6 would refuse in a registration is a 400 before
/// PostgreSQL is asked, and a value PostgreSQL refuses anyway is a 400 too: only a registry that
/// cannot answer (lost or refused connection, timeout) is a 503.
import APNSAdminQuery
import APNSModel
import APNSRegistry
import APNSRegistryMessages
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

struct AdminRegistryRoutes: Sendable {
    let store: RegistryStore

    func register(on router: Router<BasicRequestContext>) {
        router.get("/api/registry/groups/:group") { _, context -> Response in
            let group = try Self.parameter(context, "group")
            if let problem = GroupJob.problem(group: group) { return AdminRoutes.error(.badRequest, "group \(problem)") }
            do {
                let devices = try await store.devices(group: group)
                return AdminRoutes.json(GroupDevices(group: group, count: devices.count, devices: devices))
            } catch {
                return Self.failed(error)
            }
        }
        router.get("/api/registry/devices/:bundleId/:token") { _, context -> Response in
            let bundleID = try Self.parameter(context, "bundleId")
            let token = try Self.parameter(context, "token")
            if let problem = Self.deviceProblem(bundleID: bundleID, token: token) { return AdminRoutes.error(.badRequest, problem) }
            do {
                guard let device = try await store.device(bundleID: bundleID, token: token) else {
                    return AdminRoutes.error(.notFound, "no such device in the registry")
                }
                return AdminRoutes.json(device)
            } catch {
                return Self.failed(error)
            }
        }
        router.get("/registry") { request, _ -> Response in
            let group = AdminQuery.nonEmpty("group", QueryOptions.pairs(request.uri.queryParameters))
            let page: RegistryPage
            var status = HTTPResponse.Status.ok
            do {
                var devices: [DeviceRecord] = []
                var refused: String? = nil
                if let group {
                    if let problem = GroupJob.problem(group: group) {
                        refused = "group \(problem)"
                        status = .badRequest
                    } else {
                        devices = try await store.devices(group: group)
                    }
                }
                page = RegistryPage(summary: try await summary(), group: group, devices: devices, error: refused)
            } catch {
                let refused = RegistryStore.refusedValue(error)
                status = refused == nil ? .ok : .badRequest
                page = RegistryPage(
                    summary: RegistrySummary(devices: [], since: 0, counts: []), group: group, devices: [],
                    error: refused ?? Self.unavailableText)
            }
            var headers = HTTPFields()
            headers[.contentType] = "text/html; charset=utf-8"
            return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: page.render())))
        }
        router.get("/api/registry/summary") { _, _ -> Response in
            do {
                return AdminRoutes.json(try await summary())
            } catch {
                return Self.failed(error)
            }
        }
    }

    /// Devices per bundle and the counts of the last 48 UTC hours, each for the busiest bundle IDs
    /// only (`RegistryStore.deviceCountBundleLimit`, `.countedBundleLimit`) with what the rest hold.
    func summary(now: Date = Date()) async throws -> RegistrySummary {
        let hour = CountAggregator.hour(ofEpochSeconds: Int64(now.timeIntervalSince1970))
        let since = hour - 47 * 3600
        let devices = try await store.deviceCounts()
        let counts = try await store.countSummary(sinceEpochSeconds: since)
        return RegistrySummary(
            devices: devices.bundles, since: since, counts: counts.rows,
            devicesNotShown: .init(bundles: devices.bundlesNotShown, active: devices.activeNotShown, invalid: devices.invalidNotShown),
            countsNotShown: .init(bundles: counts.bundlesNotShown, count: counts.countNotShown))
    }

    static func parameter(_ context: some RequestContext, _ name: String) throws -> String {
        let raw = try context.parameters.require(name)
        return raw.removingPercentEncoding ?? raw
    }

    static let unavailableText = "the registry (PostgreSQL) is unavailable"

    /// Why a bundle ID and token could not name a registered device (contract §6's rules for
    /// registrations), or nil.
    static func deviceProblem(bundleID: String, token: String) -> String? {
        guard UntrustedText.isBundleID(bundleID) else {
            return "bundleId must be 1 to \(UntrustedText.maxBundleIDBytes) bytes of letters, digits, '.' and '-'"
        }
        guard DeviceToken(hex: token) != nil, token.utf8.count <= RegistrationMessage.maxTokenHexDigits else {
            return "token must be 2 to \(RegistrationMessage.maxTokenHexDigits) hex digits of whole bytes"
        }
        return nil
    }

    /// A failed registry query: 400 when PostgreSQL refused a value of the request, 503 when the
    /// registry could not answer.
    static func failed(_ error: any Error) -> Response {
        if let refused = RegistryStore.refusedValue(error) { return AdminRoutes.error(.badRequest, refused) }
        return AdminRoutes.error(.serviceUnavailable, unavailableText)
    }
}

struct GroupDevices: Codable {
    var group: String
    var count: Int
    var devices: [DeviceRecord]
}

struct RegistrySummary: Codable {
    /// The bundle IDs with the most devices, busiest first.
    var devices: [BundleDeviceCount]
    /// The first hour of `counts`, seconds since the epoch.
    var since: Int64
    /// The counts of the bundle IDs with the most notifications since `since`.
    var counts: [CountRow]
    /// What the bundle IDs left out of `devices` hold.
    var devicesNotShown = DevicesNotShown()
    /// What the bundle IDs left out of `counts` counted.
    var countsNotShown = CountsNotShown()

    struct DevicesNotShown: Codable, Equatable {
        var bundles: Int64 = 0
        var active: Int64 = 0
        var invalid: Int64 = 0
    }

    struct CountsNotShown: Codable, Equatable {
        var bundles: Int64 = 0
        var count: Int64 = 0
    }
}
