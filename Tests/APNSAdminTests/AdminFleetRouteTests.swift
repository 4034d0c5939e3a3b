import AMQPClient
import APNSAdmin
import APNSConfig
import APNSFleet
import APNSModel
import APNSOperations
import APNSSimulator
import APNSTopologyNames
import APNSWorker
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import TestSupport

/// The fleet's admin routes and the page's new job actions through Hummingbird's router test
/// client, with a real fleet service on the test broker: `/api/fleet`, pause and resume, the
/// graph's frame headers, per-job purge, the dead-job filter and the bulk confirmation step,
/// and heartbeats from outside shown as text.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"))
struct AdminFleetRouteTests {
    static let bearer = AdminRouteTests.bearer

    static func fleetAdmin(_ harness: AdminHarness, _ fleet: FleetService<AMQPConnection>?) throws -> AdminService {
        try AdminService(
            settings: AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: AdminHarness.token), worker: harness.worker,
            queues: harness.queues, prometheus: TestMetrics.prometheus, logger: AdminHarness.logger, fleet: fleet)
    }

    @Test func pauseResumeAndTheFleetReport() async throws {
        try await AdminHarness.with { harness in
            let fleet = FleetService(
                broker: harness.workerConnection, worker: harness.worker, identity: .current(version: "0.1.0"), interval: .milliseconds(500),
                logger: AdminHarness.logger)
            let pipeline = try #require(harness.worker.pipelines.first)
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await fleet.run() }
                defer { tasks.cancelAll() }
                try await Self.fleetAdmin(harness, fleet).makeApplication().test(.router) { client in
                    try await waitUntil("this instance in its own fleet report") {
                        let report = try FleetJSON.decoder.decode(
                            FleetReport.self, from: Data(String(buffer: try await client.execute(uri: "/api/fleet", method: .get, headers: Self.bearer).body).utf8))
                        return report.instances.contains { $0.id == fleet.identity.instanceID && $0.bundles[harness.bundle] != nil }
                    }
                    #expect(try await client.execute(uri: "/api/fleet", method: .get).status == .unauthorized)
                    #expect(try await client.execute(uri: "/api/bundles/\(harness.bundle)/pause", method: .post).status == .unauthorized)
                    // A browser's cross-site POST is refused even with the token.
                    let forged = try await client.execute(
                        uri: "/api/bundles/\(harness.bundle)/pause", method: .post,
                        headers: [.authorization: "Bearer \(AdminHarness.token)", HTTPField.Name("Sec-Fetch-Site")!: "cross-site"])
                    #expect(forged.status == .forbidden)
                    #expect(!pipeline.isPaused)

                    let paused = try await client.execute(uri: "/api/bundles/\(harness.bundle)/pause", method: .post, headers: Self.bearer)
                    #expect(paused.status == .ok)
                    #expect(pipeline.isPaused, "this instance follows at once")
                    #expect(try await FleetControl.isPaused(harness.bundle, on: harness.publisher))
                    try await waitUntil("the report to list the bundle as paused") { fleet.report().paused.contains(harness.bundle) }
                    #expect(try await client.execute(uri: "/ready", method: .get, headers: Self.bearer).status == .ok)
                    let metrics = try PrometheusText.parse(
                        String(buffer: try await client.execute(uri: "/metrics", method: .get, headers: Self.bearer).body))
                    #expect(metrics.value("apns_worker_consumer_paused", ["bundle": harness.bundle, "reason": "operator"]) == 1)
                    #expect(metrics.value("apns_worker_consumer_paused", ["bundle": harness.bundle, "reason": "held"]) == 0)
                    let page = String(buffer: try await client.execute(uri: "/", method: .get, headers: Self.bearer).body)
                    #expect(page.contains(#"<p class="alert" id="paused-alert">"#))
                    #expect(page.contains(#"action="/bundles/\#(harness.bundle)/resume""#))
                    // The page's form resumes and goes back to the page.
                    let form = try await client.execute(uri: "/bundles/\(harness.bundle)/resume", method: .post, headers: Self.bearer)
                    #expect(form.status == .seeOther && form.headers[.location] == "/")
                    #expect(!pipeline.isPaused)
                    #expect(try await !FleetControl.isPaused(harness.bundle, on: harness.publisher))
                    try await waitUntil("the report to list the bundle no more") { !fleet.report().paused.contains(harness.bundle) }
                    #expect(try await client.execute(uri: "/api/bundles/a%20b/pause", method: .post, headers: Self.bearer).status == .badRequest)

                    // Only the graph may be framed, and only by the page's own origin.
                    let frame = try await client.execute(uri: "/fleet/graph", method: .get, headers: Self.bearer)
                    #expect(frame.headers[HTTPField.Name("X-Frame-Options")!] == "SAMEORIGIN")
                    #expect(String(buffer: frame.body).contains(#"<meta http-equiv="refresh" content="5">"#))
                    let svg = try await client.execute(uri: "/fleet/graph.svg", method: .get, headers: Self.bearer)
                    #expect(svg.headers[.contentType] == "image/svg+xml")
                    #expect(String(buffer: svg.body).hasPrefix("<svg"))
                    #expect(try await client.execute(uri: "/api/fleet", method: .get, headers: Self.bearer).headers[HTTPField.Name("X-Frame-Options")!] == "DENY")
                }
            }
        }
    }

    @Test func heartbeatsFromOutsideAreShownAsText() async throws {
        try await AdminHarness.with { harness in
            let fleet = FleetService(
                broker: harness.workerConnection, worker: harness.worker, identity: .current(version: "0.1.0"), interval: .milliseconds(500),
                logger: AdminHarness.logger)
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await fleet.run() }
                defer { tasks.cancelAll() }
                try await waitUntil("the fleet queue to exist") { !fleet.report().instances.isEmpty }
                // Anyone on the vhost can publish to apns.fleet.
                let forged = FleetInstance(
                    id: "<script>alert(1)</script>", host: #"<img src=x onerror="alert(2)">"#, pid: 4242, version: "<b>9</b>",
                    startedAt: Date(), rssBytes: 1, cpuSeconds: 0, broker: "connected", heartbeatInterval: 60,
                    bundles: ["<i>evil.bundle</i>": FleetInstance.Bundle(delivered: 1)])
                try await harness.publisher.publish(
                    AMQPOutboundMessage(
                        exchange: TopologyNames.fleetExchange, routingKey: "", body: FleetMessage.heartbeat(forged).encoded(),
                        properties: AMQPProperties(contentType: "application/json"), mandatory: false))
                try await harness.publisher.publish(
                    AMQPOutboundMessage(
                        exchange: TopologyNames.fleetExchange, routingKey: "", body: Array("garbage".utf8), properties: AMQPProperties(),
                        mandatory: false))
                try await waitUntil("the forged heartbeat to be heard") { fleet.report().instances.contains { $0.pid == 4242 } }
                try await Self.fleetAdmin(harness, fleet).makeApplication().test(.router) { client in
                    let page = String(buffer: try await client.execute(uri: "/", method: .get, headers: Self.bearer).body)
                    #expect(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
                    #expect(page.contains("&lt;img src=x onerror=&quot;alert(2)&quot;&gt;"))
                    #expect(page.contains("&lt;i&gt;evil.bundle&lt;/i&gt;"))
                    #expect(!page.contains("<script>") && !page.contains("<img src=x") && !page.contains("<i>evil") && !page.contains("<b>9</b>"))
                }
            }
        }
    }

    /// Under a view full of forged bundles (heartbeats of 170 bundles with 255-byte
    /// keys, as the attack bench sends), `/api/fleet` was one JSON of every bundle and `/` drew a
    /// row each, past the deployment's memory limit. Each answer is bounded now, and following
    /// `next` reaches every live instance once.
    @Test func aForgedFleetIsServedInBoundedPagesThatReachEveryInstance() async throws {
        try await AdminHarness.with { harness in
            let fleet = FleetService(
                broker: harness.workerConnection, worker: harness.worker, identity: .current(version: "0.1.0"), interval: .seconds(10),
                logger: AdminHarness.logger)
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await fleet.run() }
                defer { tasks.cancelAll() }
                try await waitUntil("this instance in its own view") { fleet.report().instances.contains { $0.id == fleet.identity.instanceID } }
                let prefix = "forged-\(UUID().uuidString.prefix(8))"
                let forgedIDs = (0..<40).map { "\(prefix)-\($0)" }
                for (n, id) in forgedIDs.enumerated() {
                    let keys = (0..<170).map { index -> String in
                        let head = "forged.\(n).\(index)."
                        return head + String(repeating: "x", count: FleetInstance.maxBundleKeyBytes - head.utf8.count)
                    }
                    let forged = FleetInstance(
                        id: id, host: "forger", pid: 1, version: "6.6.6", startedAt: Date(), rssBytes: 1, cpuSeconds: 0, broker: "connected",
                        heartbeatInterval: 60, bundles: Dictionary(uniqueKeysWithValues: keys.map { ($0, FleetInstance.Bundle(delivered: n)) }))
                    try await harness.publisher.publish(
                        AMQPOutboundMessage(
                            exchange: TopologyNames.fleetExchange, routingKey: "", body: FleetMessage.heartbeat(forged).encoded(),
                            properties: AMQPProperties(contentType: "application/json"), mandatory: false))
                }
                try await waitUntil("the forged heartbeats to be heard") {
                    Set(fleet.report().instances.map(\.id)).isSuperset(of: forgedIDs)
                }
                try await Self.fleetAdmin(harness, fleet).makeApplication().test(.router) { client in
                    func pages(_ query: String) async throws -> [FleetReport] {
                        var reports: [FleetReport] = []
                        var after: String?
                        repeat {
                            var uri = "/api/fleet?\(query)"
                            if let after { uri += "&after=\(after.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)" }
                            let response = try await client.execute(uri: uri, method: .get, headers: Self.bearer)
                            #expect(response.status == .ok)
                            #expect(response.body.readableBytes <= FleetPage.maxBytes + (64 << 10), "a page of \(response.body.readableBytes) bytes")
                            let report = try FleetJSON.decoder.decode(FleetReport.self, from: Data(String(buffer: response.body).utf8))
                            reports.append(report)
                            after = report.next
                        } while after != nil && reports.count < 1000
                        return reports
                    }
                    for query in ["", "limit=7"] {
                        let reports = try await pages(query)
                        let ids = reports.flatMap { $0.instances.map(\.id) }
                        #expect(reports.count >= 2, "\(query): the forged view (about 2.5 MB of JSON) takes more than one page")
                        #expect(ids == ids.sorted() && Set(ids).count == ids.count, "\(query): each instance once, in order of id")
                        #expect(Set(ids).isSuperset(of: forgedIDs + [fleet.identity.instanceID]), "\(query): every instance reached")
                        #expect(reports.allSatisfy { $0.instances.count <= (query.isEmpty ? FleetPage.defaultLimit : 7) })
                    }
                    #expect(try await client.execute(uri: "/api/fleet?limit=0", method: .get, headers: Self.bearer).status == .badRequest)

                    // The page draws this instance's bundle and the busiest 50 others, and counts the rest.
                    let page = String(buffer: try await client.execute(uri: "/", method: .get, headers: Self.bearer).body)
                    #expect(page.components(separatedBy: #"<tr class="bundle-row""#).count - 1 == 1 + FleetBundleSummary.defaultLimit)
                    #expect(page.contains(#"<tr class="bundle-row" data-bundle="\#(harness.bundle)">"#))
                    #expect(page.contains(#"<tr id="bundles-more">"#))
                    #expect(page.utf8.count < 512 << 10, "the page is \(page.utf8.count) bytes")
                    #expect(try await client.execute(uri: "/fleet/graph", method: .get, headers: Self.bearer).status == .ok)
                }
            }
        }
    }

    /// The admin server's reads (depths, hand-back checks) share one connection that outlives
    /// page views, instead of a new one each.
    @Test func pageViewsShareOnePooledReadConnection() async throws {
        let broker = try TestBroker.require()
        try await AdminHarness.with { harness in
            let name = "admin-pool-\(UUID().uuidString.prefix(8))"
            let queues = QueueInspector(
                amqp: try AMQPConfiguration(urlStrings: [broker.amqpURL], connectionName: name), bundleIDs: [harness.bundle],
                retryDelays: [AdminHarness.retryDelay], logger: AdminHarness.logger, pooledReads: true)
            let admin = try AdminService(
                settings: AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: AdminHarness.token),
                worker: harness.worker, queues: queues, prometheus: TestMetrics.prometheus, logger: AdminHarness.logger)
            try await admin.makeApplication().test(.router) { client in
                for _ in 0..<3 {
                    let page = try await client.execute(uri: "/", method: .get, headers: Self.bearer)
                    #expect(page.status == .ok)
                    #expect(!String(buffer: page.body).contains(#"id="queue-error""#))
                }
            }
            // The management API learns of connections a moment late.
            var names: [String] = []
            try await waitUntil("the pooled read connection in the broker's list") {
                let connections = try await broker.managementJSON("/connections") as? [[String: Any]] ?? []
                names = connections.compactMap { ($0["client_properties"] as? [String: Any])?["connection_name"] as? String }
                return names.contains("\(name) (reads)")
            }
            #expect(names.filter { $0 == "\(name) (reads)" }.count == 1, "one read connection for three page views: \(names.filter { $0.hasPrefix(name) })")
            await queues.close()
        }
    }

    @Test func jobActionsOfThePage() async throws {
        try await AdminHarness.with { harness in
            let failing = 55
            harness.simulator.script(token: AdminHarness.token(failing), .always(status: 503, reason: .serviceUnavailable))
            let retried = try await harness.publishJob(token: failing)
            let dead = [try await harness.publishMalformedJob(), try await harness.publishMalformedJob(), try await harness.publishMalformedJob()]
            try await waitUntil("jobs to reach their ends") { harness.jobs("retry") == 1 && harness.jobs("dead") == 3 }
            try await Self.fleetAdmin(harness, nil).makeApplication().test(.router) { client in
                // Without a fleet service: the page shows this instance, the fleet routes say why not.
                #expect(try await client.execute(uri: "/api/fleet", method: .get, headers: Self.bearer).status == .serviceUnavailable)
                #expect(try await client.execute(uri: "/api/bundles/\(harness.bundle)/pause", method: .post, headers: Self.bearer).status == .serviceUnavailable)
                var page = String(buffer: try await client.execute(uri: "/", method: .get, headers: Self.bearer).body)
                #expect(page.contains(#"<tr class="retry-job" data-job-id="\#(retried)">"#))
                #expect(page.contains("<td>1h</td>"), "the retry queue's delay")
                for id in dead { #expect(page.contains(#"<tr class="dead-job" data-job-id="\#(id)">"#)) }

                // The dead-job filter.
                page = String(buffer: try await client.execute(uri: "/?reason=BadDeviceToken", method: .get, headers: Self.bearer).body)
                #expect(!page.contains(#"class="dead-job""#))
                #expect(page.contains(#"href="/dead/confirm?action=purge&amp;reason=BadDeviceToken""#))
                page = String(buffer: try await client.execute(uri: "/?bundle=\(harness.bundle)&reason=MalformedJob", method: .get, headers: Self.bearer).body)
                #expect(page.components(separatedBy: #"class="dead-job""#).count == 4)

                // Bulk: the confirmation step counts the queue's depth (with a reason, as an upper
                // bound: counting by listing read whole queues), moves nothing...
                let confirm = try await client.execute(
                    uri: "/dead/confirm?action=requeue&bundle=\(harness.bundle)&reason=MalformedJob", method: .get, headers: Self.bearer)
                let confirmPage = String(buffer: confirm.body)
                #expect(confirmPage.contains("Requeue <strong>up to 3</strong> dead jobs"))
                #expect(confirmPage.contains(#"action="/bulk/dead/requeue?bundle=\#(harness.bundle)&amp;reason=MalformedJob""#))
                #expect(try await harness.queues.list(.dead).count == 3)
                #expect(try await client.execute(uri: "/dead/confirm?action=explode", method: .get, headers: Self.bearer).status == .badRequest)
                // ...and its button does it.
                let bulk = try await client.execute(
                    uri: "/bulk/dead/requeue?bundle=\(harness.bundle)&reason=MalformedJob", method: .post, headers: Self.bearer)
                #expect(bulk.status == .seeOther)
                try await waitUntil("the three to come back dead") { harness.jobs("dead") == 6 }

                // One job purged from its row; then the rest with the confirmed bulk purge.
                let one = try await client.execute(uri: "/dead/\(dead[0])/purge", method: .post, headers: Self.bearer)
                #expect(one.status == .seeOther)
                #expect(try await harness.queues.list(.dead).compactMap(\.jobID).sorted() == [dead[1], dead[2]].sorted())
                let purgeConfirm = String(buffer: try await client.execute(uri: "/dead/confirm?action=purge", method: .get, headers: Self.bearer).body)
                #expect(purgeConfirm.contains("Purge <strong>2</strong> dead jobs") && purgeConfirm.contains("gone for good"))
                #expect(try await client.execute(uri: "/bulk/dead/purge", method: .post, headers: Self.bearer).status == .seeOther)
                #expect(try await harness.queues.list(.dead).isEmpty)

                // The retry job: "requeue now" sends it back at once (and it fails into retry again).
                let now = try await client.execute(uri: "/retry/\(retried)/requeue", method: .post, headers: Self.bearer)
                #expect(now.status == .seeOther)
                try await waitUntil("the requeued retry job to be tried again") { harness.jobs("retry") == 2 }
                // Counted when its end was decided, so not yet in its retry queue, maybe: a purge
                // before it arrives finds nothing (seen once by a helper's run).
                try await waitUntil("the requeued retry job back in its retry queue") {
                    try await harness.queues.list(.retry).compactMap(\.jobID) == [retried]
                }
                let purged = try await client.execute(uri: "/retry/\(retried)/purge", method: .post, headers: Self.bearer)
                #expect(purged.status == .seeOther)
                #expect(try await harness.queues.list(.retry).isEmpty)
            }
        }
    }
}
