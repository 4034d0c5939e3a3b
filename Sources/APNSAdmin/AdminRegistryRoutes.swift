/// The registry's admin routes (contract §6), present when the worker has a `[registry]`:
/// `GET /api/registry/groups/{group}`, `GET /api/registry/devices/{bundleId}/{token}`, and
/// `GET /api/registry/summary` (devices per bundle and the last 48 hours of counts, for the page).
/// Behind the admin token like every other route; tokens are shown whole here (never in logs).
import APNSCore
import APNSRegistry
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

struct AdminRegistryRoutes: Sendable {
    let store: RegistryStore

    func register(on router: Router<BasicRequestContext>) {
        router.get("/api/registry/groups/:group") { _, context -> Response in
            let group = try Self.parameter(context, "group")
            do {
                let devices = try await store.devices(group: group)
                return AdminRoutes.json(GroupDevices(group: group, count: devices.count, devices: devices))
            } catch {
                return Self.unavailable(error)
            }
        }
        router.get("/api/registry/devices/:bundleId/:token") { _, context -> Response in
            let bundleID = try Self.parameter(context, "bundleId")
            let token = try Self.parameter(context, "token")
            do {
                guard let device = try await store.device(bundleID: bundleID, token: token) else {
                    return AdminRoutes.error(.notFound, "no such device in the registry")
                }
                return AdminRoutes.json(device)
            } catch {
                return Self.unavailable(error)
            }
        }
        router.get("/registry") { request, _ -> Response in
            let group = AdminQuery.nonEmpty("group", QueryOptions.pairs(request.uri.queryParameters))
            let page: RegistryPage
            do {
                var devices: [DeviceRecord] = []
                if let group { devices = try await store.devices(group: group) }
                page = RegistryPage(summary: try await summary(), group: group, devices: devices, error: nil)
            } catch {
                page = RegistryPage(
                    summary: RegistrySummary(devices: [], since: 0, counts: []), group: group, devices: [],
                    error: "the registry (PostgreSQL) is unavailable")
            }
            var headers = HTTPFields()
            headers[.contentType] = "text/html; charset=utf-8"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: page.render())))
        }
        router.get("/api/registry/summary") { _, _ -> Response in
            do {
                return AdminRoutes.json(try await summary())
            } catch {
                return Self.unavailable(error)
            }
        }
    }

    /// Devices per bundle and the counts of the last 48 UTC hours.
    func summary(now: Date = Date()) async throws -> RegistrySummary {
        let hour = CountAggregator.hour(ofEpochSeconds: Int64(now.timeIntervalSince1970))
        let since = hour - 47 * 3600
        return RegistrySummary(devices: try await store.deviceCounts(), since: since, counts: try await store.counts(sinceEpochSeconds: since))
    }

    static func parameter(_ context: some RequestContext, _ name: String) throws -> String {
        let raw = try context.parameters.require(name)
        return raw.removingPercentEncoding ?? raw
    }

    static func unavailable(_ error: any Error) -> Response {
        AdminRoutes.error(.serviceUnavailable, "the registry (PostgreSQL) is unavailable")
    }
}

struct GroupDevices: Codable {
    var group: String
    var count: Int
    var devices: [DeviceRecord]
}

struct RegistrySummary: Codable {
    var devices: [BundleDeviceCount]
    /// The first hour of `counts`, seconds since the epoch.
    var since: Int64
    var counts: [CountRow]
}
