import AMQPClient
import APNSAdmin
import APNSOperations
import APNSTopologyNames
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import TestSupport

/// Bounded work through the admin: every listing is a page (API and page), the next page is one
/// `offset` away, and the bulk confirmation counts from the queue's depth.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"))
struct AdminPagingTests {
    static let bearer: HTTPFields = [.authorization: "Bearer \(AdminHarness.token)"]

    @Test func listingsArePagesAndCountsComeFromDepths() async throws {
        try await AdminHarness.with { harness in
            let dead = TopologyNames.deadQueue(harness.bundle)
            for index in 0..<150 {
                var properties = AMQPProperties.persistentJSON
                properties.headers = [JobHeaders.reason: .string(index % 2 == 0 ? "BadDeviceToken" : "Unregistered")]
                try await harness.publisher.publishAgainAfterNacks(AMQPOutboundMessage(
                    exchange: "", routingKey: dead, body: Array(#"{"id":"page-\#(index)","payload":{}}"#.utf8), properties: properties))
            }
            try await harness.admin.makeApplication().test(.router) { client in
                let first = try AdminRouteTests.json(try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)", method: .get, headers: Self.bearer))
                #expect(first["count"] as? Int == 100 && first["limit"] as? Int == 100 && first["next"] as? Int == 100)
                #expect((first["scanned"] as? Int ?? 0) <= 101)
                let second = try AdminRouteTests.json(
                    try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)&offset=100", method: .get, headers: Self.bearer))
                #expect(second["count"] as? Int == 50 && second["next"] == nil)
                #expect(((second["jobs"] as? [[String: Any]])?.first?["jobID"] as? String) == "page-100")
                // A filter keeps the page size (it used to list every match).
                let filtered = try AdminRouteTests.json(
                    try await client.execute(uri: "/api/dead?bundle=\(harness.bundle)&reason=BadDeviceToken&limit=30", method: .get, headers: Self.bearer))
                #expect(filtered["count"] as? Int == 30 && filtered["next"] as? Int == 30)
                #expect(try await client.execute(uri: "/api/dead?limit=501", method: .get, headers: Self.bearer).status == .badRequest)

                // The page: 100 dead jobs and a link to the next 50.
                let page = String(buffer: try await client.execute(uri: "/?bundle=\(harness.bundle)", method: .get, headers: Self.bearer).body)
                #expect(page.components(separatedBy: "<tr class=\"dead-job\"").count - 1 == 100)
                #expect(page.contains("Dead jobs 1 to 100") && page.contains("offset=100\">next page</a>"))
                let next = String(buffer: try await client.execute(uri: "/?bundle=\(harness.bundle)&offset=100", method: .get, headers: Self.bearer).body)
                #expect(next.components(separatedBy: "<tr class=\"dead-job\"").count - 1 == 50)
                #expect(next.contains("Dead jobs 101 to 150") && !next.contains("next page"))

                // The confirmation counts the queue's depth; with a reason, as an upper bound.
                let confirm = String(buffer: try await client.execute(
                    uri: "/dead/confirm?action=purge&bundle=\(harness.bundle)", method: .get, headers: Self.bearer).body)
                #expect(confirm.contains("<strong>150</strong>"))
                let byReason = String(buffer: try await client.execute(
                    uri: "/dead/confirm?action=purge&bundle=\(harness.bundle)&reason=Unregistered", method: .get, headers: Self.bearer).body)
                #expect(byReason.contains("<strong>up to 150</strong>"))
            }
            #expect(try await harness.queues.readyCount(.dead, bundleID: harness.bundle) == 150)
        }
    }

    /// A `bundle` whose dead or retry queue name is longer than AMQP allows (the query takes up
    /// to 255 bytes) names no queue: an empty listing, not the broker being unreachable. Was:
    /// the client refused the name (`invalidName`), the API answered 503 "broker: …" and the page
    /// said queue depths and jobs were unavailable.
    @Test func aBundleNoQueueNameCanHoldListsNothingAndIsNoBrokerOutage() async throws {
        let overlong = String(repeating: "b", count: 250)
        try await AdminHarness.with { harness in
            try await harness.admin.makeApplication().test(.router) { client in
                for kind in ["dead", "retry"] {
                    let listing = try await client.execute(uri: "/api/\(kind)?bundle=\(overlong)", method: .get, headers: Self.bearer)
                    #expect(listing.status == .ok)
                    #expect(try AdminRouteTests.json(listing)["count"] as? Int == 0)
                    let show = try await client.execute(uri: "/api/\(kind)/some-job?bundle=\(overlong)", method: .get, headers: Self.bearer)
                    #expect(show.status == .notFound)
                    let purge = try await client.execute(uri: "/api/\(kind)/purge?bundle=\(overlong)&confirm=yes", method: .post, headers: Self.bearer)
                    #expect(purge.status == .ok)
                }
                let page = String(buffer: try await client.execute(uri: "/?bundle=\(overlong)", method: .get, headers: Self.bearer).body)
                #expect(!page.contains("queue-error"))
            }
        }
    }
}
