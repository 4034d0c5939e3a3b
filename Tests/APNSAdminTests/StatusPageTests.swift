@testable import APNSAdmin
import APNSFleet
import APNSModel
import APNSOperations
import APNSWorker
import Foundation
import Testing

/// The fleet page's view model without a broker: fleet totals over this instance's own counts,
/// loud held and paused banners, the queue table's delays and latency, and outside values
/// rendered as text.
struct StatusPageTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let bundle = "com.example.app"

    static func instance(_ id: String, delivered: Int, held: Bool = false, paused: Bool = false, taken: Date? = nil) -> FleetInstance {
        FleetInstance(
            id: id, host: "host-\(id)", pid: Int32(id.utf8.count * 1000), version: "0.1.0", startedAt: now.addingTimeInterval(-60),
            rssBytes: 50 << 20, cpuSeconds: 2.5, broker: "connected", heartbeatInterval: 5,
            bundles: [bundle: FleetInstance.Bundle(delivered: delivered, dead: 1, inFlight: 3, held: held, paused: paused, lastTakenPublishedAt: taken)])
    }

    static func page(
        _ instances: [FleetInstance], paused: [String] = [], depths: [QueueDepth]? = nil, pools: [WorkerStatus.Pool] = []
    ) -> StatusPage {
        var view = FleetView()
        for instance in instances { view.received(instance, at: now.addingTimeInterval(-1)) }
        let local = WorkerStatus(
            broker: "connected",
            bundles: [WorkerStatus.Bundle(bundleID: bundle, held: false, activity: WorkerStatistics().activity(bundle: bundle), connections: [:])])
        var status = local
        status.pools = pools
        return StatusPage(
            status: status, fleet: FleetReport(instances: view.live(now: now), paused: paused), fleetView: view, instanceID: instances.first?.id,
            depths: depths, retryDelays: [.seconds(10), .seconds(300)], queueError: nil, deadJobs: [], retryJobs: [], deadFilter: JobFilter(),
            limit: 100, now: now)
    }

    /// A listing that could not be read (the broker refused, or its messages did not arrive:
    /// another reader held them) says why; "No dead jobs." is only for a listing read whole.
    @Test func aListingThatCouldNotBeReadSaysSoNeverNone() {
        var page = Self.page([Self.instance("a", delivered: 10)])
        #expect(page.render().contains("No dead jobs.") && page.render().contains("No retry jobs."))
        page.deadUnreadable = "broker: connection refused"
        page.retryUnreadable = "3 of the messages the queues hold did not arrive"
        let html = page.render()
        #expect(!html.contains("No dead jobs.") && !html.contains("No retry jobs."))
        #expect(html.contains("Dead jobs could not be read: broker: connection refused"))
        #expect(html.contains("Retry jobs could not be read: 3 of the messages the queues hold did not arrive"))
        #expect(!html.contains("dead-unreadable"), "nothing shown, so nothing partly shown")
    }

    @Test func theBundleRowAddsUpTheFleet() {
        let page = Self.page([Self.instance("a", delivered: 10), Self.instance("bb", delivered: 32), Self.instance("ccc", delivered: 58)])
        let row = page.bundleRow(Self.bundle)
        #expect(row["delivered"] as? Int == 100)
        #expect(row["dead"] as? Int == 3)
        #expect(row["inFlight"] as? Int == 9)
        #expect(row["state"] as? String == "running")
        #expect(row["pausePath"] as? String == "/bundles/com.example.app/pause")
        let html = page.render()
        #expect(html.contains("Instances (3)"))
        #expect(html.contains("<td>a (this one)</td>"))
        #expect(html.components(separatedBy: #"<tr class="instance-row""#).count == 4)
        #expect(html.contains("<td>50.0 MiB</td>"))
        #expect(html.contains("<td>2.5 s</td>"))
        #expect(!html.contains("held-alert") && !html.contains("paused-alert"))
    }

    /// Forty bundles of one team: one pool row per environment naming its bundles (up to a
    /// few), not a connections cell per bundle; a pool no job needed yet says `idle`.
    @Test func sharedPoolsAreOneRowEachWithTheirBundles() {
        let bundles = (0..<40).map { "com.example.app\($0)" }.sorted()
        func connections(_ state: String, _ count: Int) -> [String: Int] {
            var all = Dictionary(uniqueKeysWithValues: TransportConnectionState.allCases.map { ($0.rawValue, 0) })
            all[state] = count
            return all
        }
        let pools = [
            WorkerStatus.Pool(
                name: "token TEAM1/KEY1#0123abcd production api.push.apple.com:443", environment: "production", bundles: bundles,
                connections: connections("ready", 2)),
            WorkerStatus.Pool(
                name: "token TEAM1/KEY1#0123abcd sandbox api.sandbox.push.apple.com:443", environment: "sandbox", bundles: bundles,
                connections: connections("idle", 2)),
        ]
        let page = Self.page([Self.instance("a", delivered: 1)], pools: pools)
        let html = page.render()
        #expect(html.components(separatedBy: #"<tr class="pool-row""#).count == 3)
        #expect(html.contains("<td>ready 2</td><td>40: com.example.app0, com.example.app1,"))
        #expect(html.contains("<td>idle 2</td>"))
        #expect(page.bundleRow(Self.bundle)["connections"] as? String == "pooled (below)")
        // Without pools (transports not pooled) there is no pool table.
        #expect(!Self.page([Self.instance("a", delivered: 1)]).render().contains(#"id="pools""#))
    }

    @Test func heldAndPausedBundlesAreLoud() {
        let page = Self.page([Self.instance("a", delivered: 1, held: true, paused: true)], paused: [Self.bundle])
        let html = page.render()
        #expect(html.contains(#"<p class="alert" id="held-alert">HELD"#))
        #expect(html.contains(#"<p class="alert" id="paused-alert">PAUSED"#))
        #expect(html.contains(#"<td class="held">HELD, PAUSED</td>"#))
        #expect(html.contains(#"action="/bundles/com.example.app/resume""#))
    }

    @Test func queuesShowDelayAndLatency() {
        let taken = Self.now.addingTimeInterval(-42)
        let depths = [
            QueueDepth(queue: "apns.com.example.app", bundleID: Self.bundle, role: "work", messages: 7, consumers: 2),
            QueueDepth(queue: "apns.com.example.app.retry.5m", bundleID: Self.bundle, role: "retry", messages: 1, consumers: 0),
        ]
        let page = Self.page([Self.instance("a", delivered: 1, taken: taken)], depths: depths)
        #expect(page.queueRow(depths[0])["latency"] as? String == "≈ 42 s")
        #expect(page.queueRow(depths[1])["delay"] as? String == "5m")
        #expect(page.bundleRow(Self.bundle)["workDepth"] as? String == "7")
        // A bundle whose queues this instance does not read has no depths, not zeros.
        var other = Self.instance("b", delivered: 1)
        other.bundles = ["com.example.other": FleetInstance.Bundle(delivered: 5)]
        #expect(Self.page([other], depths: depths).bundleRow("com.example.other")["workDepth"] as? String == "?")
    }

    @Test func valuesFromOtherInstancesStayText() {
        var hostile = Self.instance("<script>x()</script>", delivered: 1)
        hostile.host = "<b>host</b>"
        hostile.bundles["<i>b</i>"] = FleetInstance.Bundle(delivered: 1)
        let html = Self.page([hostile]).render()
        #expect(html.contains("&lt;script&gt;x()&lt;/script&gt;") && html.contains("&lt;b&gt;host&lt;/b&gt;") && html.contains("&lt;i&gt;b&lt;/i&gt;"))
        #expect(!html.contains("<script>") && !html.contains("<b>host") && !html.contains("<i>b"))
        // A bundle ID the pause route would refuse gets no button.
        #expect(!html.contains("/bundles/<i>") && !html.contains("/bundles/%3C") && !html.contains("/bundles/&lt;"))
        #expect(html.contains(#"action="/bundles/com.example.app/pause""#))
    }

    /// A forged view of thousands of bundles drew a row each (the worker passed its
    /// memory limit): the page draws this instance's bundles and the busiest 50 others, counts
    /// the rest, and names at most 10 held or paused bundles in a banner or cell.
    @Test func aViewOfManyBundlesDrawsABoundedPage() {
        var instances = [Self.instance("a", delivered: 10)]
        for n in 0..<3 {
            var forged = Self.instance("forged-\(n)", delivered: 0, held: true, paused: true)
            forged.bundles = Dictionary(uniqueKeysWithValues: (0..<400).map {
                (String(format: "com.forged%d.b%03d", n, $0), FleetInstance.Bundle(delivered: $0, held: true, paused: true))
            })
            instances.append(forged)
        }
        let page = Self.page(instances, paused: instances.flatMap(\.bundles.keys).sorted())
        let html = page.render()
        let rows = html.components(separatedBy: #"<tr class="bundle-row""#).count - 1
        #expect(rows == 1 + FleetBundleSummary.defaultLimit)
        #expect(html.contains(#"<tr class="bundle-row" data-bundle="com.example.app">"#), "this instance's own bundle is always drawn")
        #expect(html.contains(#"<tr class="bundle-row" data-bundle="com.forged0.b399">"#), "the busiest others next")
        #expect(!html.contains(#"data-bundle="com.forged0.b000""#))
        #expect(html.contains(#"<tr id="bundles-more"><td colspan="11">1150 more bundles"#))
        #expect(html.contains("com.forged0.b009 and 1190 more</p>"), "the held banner names ten")
        #expect(html.contains("com.forged0.b008 and 1191 more</p>"), "the paused banner names ten")
        #expect(html.contains(#"<td class="held">com.forged0.b000, com.forged0.b001, com.forged0.b002, com.forged0.b003, com.forged0.b004, com.forged0.b005, com.forged0.b006, com.forged0.b007, com.forged0.b008, com.forged0.b009 and 390 more</td>"#))
        #expect(html.utf8.count < 200 << 10, "\(html.utf8.count) bytes")
    }

    /// The admin API (`/api/fleet`, `/api/dead`, `/api/retry`) and the page write dates by
    /// `RFC3339` now: the bytes of the `.iso8601` encoder they had (Foundation's, ICU's on Linux,
    /// is the oracle here), fractions rounded down and dates before 1970 included.
    @Test(arguments: [0, 1_800_000_000.7, 1_795_769_845.999_9, -0.5, 951_782_400, 4_102_444_799.5])
    func theAPIsDatesAreTheBytesISO8601Wrote(seconds: Double) throws {
        let iso8601 = JSONEncoder()
        iso8601.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        iso8601.dateEncodingStrategy = .iso8601
        let date = Date(timeIntervalSince1970: seconds)
        var instance = Self.instance("a", delivered: 1, taken: date.addingTimeInterval(-0.25))
        instance.startedAt = date
        instance.lastSeen = date.addingTimeInterval(1)
        let fleet = FleetReport(instances: [instance], paused: ["com.example.app"])
        #expect(try AdminRoutes.encoder.encode(fleet) == iso8601.encode(fleet))
        let job = QueuedJob(
            queue: "apns.b.dead", bundleID: "b", position: 0, jobID: "j", reason: "BadDeviceToken", status: 400, attempts: 1,
            failedAt: date, publishedAt: date.addingTimeInterval(-3.5), error: "e", lastReason: nil, headers: ["x-apns-failed-at": "-"],
            body: "{}", tokenRedacted: nil)
        #expect(try AdminRoutes.encoder.encode([job]) == iso8601.encode([job]))
        #expect(StatusPage.timestamp(date) == date.formatted(.iso8601))
    }

    @Test func bulkLinksCarryTheFilter() {
        #expect(StatusPage.path("/dead/confirm", ["action": "purge", "bundle": "com.example.app", "reason": nil]) == "/dead/confirm?action=purge&bundle=com.example.app")
        #expect(StatusPage.path("/dead/confirm", ["action": "requeue", "bundle": nil, "reason": "a b&c"]) == "/dead/confirm?action=requeue&reason=a%20b%26c")
    }
}
