import APNSAdminQuery
import APNSFleet
import APNSModel
import Foundation
import Testing

/// What the admin serves of a fleet view, bounded whatever the view holds: the pages
/// of `GET /api/fleet` (every live instance reachable through `next`, each page within its
/// bytes), their query, the bundles the HTML page draws, and the graph's fleet-wide series.
struct FleetPageTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    /// The answer as a client reads it.
    struct Answer: Decodable {
        var instances: [FleetInstance]
        var paused: [String]
        var dropped: FleetDrops
        var next: String?
    }

    static func decode(_ page: FleetPage) throws -> Answer {
        try FleetJSON.decoder.decode(Answer.self, from: Data(page.body))
    }

    static func longKey(_ n: Int, _ instance: Int = 0) -> String {
        let head = "forged.\(instance).\(n)."
        return head + String(repeating: "x", count: FleetInstance.maxBundleKeyBytes - head.utf8.count)
    }

    /// The attack bench's view: heartbeats of 170 bundles with 255-byte keys (62 KiB each) from
    /// forged instances until the view's bytes turn them away.
    static func forgedView(first: [FleetInstance] = []) -> FleetView {
        var view = FleetView()
        view.received(FleetTests.instance("real", delivered: 5), at: t0)
        for instance in first { view.received(instance, at: t0) }
        for n in 0..<200 {
            var forged = FleetTests.instance("forged-\(n)")
            forged.bundles = Dictionary(uniqueKeysWithValues: (0..<170).map { (longKey($0, n), FleetInstance.Bundle(delivered: n, paused: $0 == 0)) })
            view.received(forged, at: t0)
        }
        return view
    }

    /// Follows `next` from the first page; every page's body and instance count checked.
    static func pages(_ live: [FleetInstance], limit: Int = FleetPage.defaultLimit, maxBytes: Int = FleetPage.maxBytes) throws -> [Answer] {
        var answers: [Answer] = []
        var after: String?
        repeat {
            let page = FleetPage(live: live, paused: [], dropped: FleetDrops(), request: .init(after: after, limit: limit), maxBytes: maxBytes)
            let answer = try decode(page)
            #expect(answer.instances.map(\.id) == page.instanceIDs)
            #expect(answer.next == page.next)
            #expect(!answer.instances.isEmpty && answer.instances.count <= limit)
            // Within its bytes, or one instance alone (a heartbeat is at most 64 KiB).
            #expect(page.body.count <= maxBytes + (32 << 10) || answer.instances.count == 1, "\(page.body.count) bytes")
            answers.append(answer)
            after = answer.next
        } while after != nil && answers.count < 10_000
        return answers
    }

    @Test func aForgedViewIsServedInBoundedPagesThroughWhichEveryInstanceIsReached() throws {
        let view = Self.forgedView()
        let now = Self.t0.addingTimeInterval(1)
        let live = view.live(now: now)
        let bundles = live.reduce(0) { $0 + $1.bundles.count }
        #expect(bundles > 10_000, "the view is full of forged bundles: \(bundles)")
        let whole = FleetPage(live: live, paused: [], dropped: view.dropped, request: .init(), maxBytes: .max)
        #expect(whole.body.count > 2 * FleetPage.maxBytes, "all of it as one answer: \(whole.body.count) bytes")

        let answers = try Self.pages(live)
        #expect(answers.count >= 3)
        let ids = answers.flatMap { $0.instances.map(\.id) }
        #expect(ids == live.map(\.id).sorted(), "every live instance once, in order of id")
        #expect(answers.flatMap(\.instances).reduce(0) { $0 + $1.bundles.count } == bundles)
        #expect(answers.dropLast().allSatisfy { $0.next != nil } && answers.last?.next == nil)
        // The paused bundles of a page are the broker's (none here), not what its instances claim.
        #expect(answers.contains { !$0.instances.flatMap { $0.bundles.filter(\.value.paused).keys }.isEmpty })
        for answer in answers { #expect(answer.paused.isEmpty) }
        // Pages of two instances reach the same instances.
        #expect(try Self.pages(live, limit: 2).flatMap { $0.instances.map(\.id) } == ids)
    }

    @Test func anHonestFleetIsOnePageAndAMissingCursorStillLeadsOn() throws {
        var view = FleetView()
        for n in 0..<200 {
            var instance = FleetTests.instance(String(format: "host-%03d", n), delivered: n)
            for b in 0..<5 { instance.bundles["com.example.app\(b)"] = FleetInstance.Bundle(delivered: n, paused: n == 7 && b == 2) }
            view.received(instance, at: Self.t0)
        }
        let live = view.live(now: Self.t0)
        let page = FleetPage(live: live, paused: ["com.example.mine"], dropped: FleetDrops(ignored: 3), request: .init())
        let answer = try Self.decode(page)
        #expect(answer.instances.count == 200 && answer.next == nil && page.next == nil)
        #expect(answer.paused == ["com.example.mine"], "what instance host-007 says of com.example.app2 is its own")
        #expect(answer.dropped.ignored == 3)
        #expect(!String(decoding: page.body, as: UTF8.self).contains(#""next""#))
        // The instance a cursor names may be gone by the next request: the page starts after it all the same.
        let gone = live.filter { $0.id != "host-100" }
        let after = try Self.decode(FleetPage(live: gone, paused: [], dropped: FleetDrops(), request: .init(after: "host-100", limit: 3)))
        #expect(after.instances.map(\.id) == ["host-101", "host-102", "host-103"] && after.next == "host-103")
        // After the last one: an empty last page.
        let end = try Self.decode(FleetPage(live: live, paused: [], dropped: FleetDrops(), request: .init(after: "host-199")))
        #expect(end.instances.isEmpty && end.next == nil)
    }

    @Test func theQueryOfAPage() throws {
        #expect(try AdminQuery.fleetPage([]) == FleetPage.Request(after: nil, limit: FleetPage.defaultLimit))
        #expect(try AdminQuery.fleetPage([("limit", "25"), ("after", "host-1-abc")]) == FleetPage.Request(after: "host-1-abc", limit: 25))
        #expect(try AdminQuery.fleetPage([("after", ""), ("limit", "")]) == FleetPage.Request())
        for bad in [[("limit", "0")], [("limit", "1001")], [("limit", "ten")], [("after", String(repeating: "a", count: 201))]] {
            #expect(throws: AdminQuery.Problem.self) { try AdminQuery.fleetPage(bad) }
        }
    }

    @Test func thePageDrawsItsOwnBundlesAndTheBusiestOthersAndCountsTheRest() throws {
        // Work heard in the last minute ranks a bundle first; then work since start; then its ID.
        var busy = FleetTests.instance("busy", delivered: 0, bundle: "com.example.busy")
        busy.bundles["com.example.quiet"] = FleetInstance.Bundle(delivered: 1_000_000, held: true)
        var view = Self.forgedView(first: [busy])
        busy.bundles["com.example.busy"]?.delivered = 10
        #expect(view.received(busy, at: Self.t0.addingTimeInterval(10)) == .kept)
        let now = Self.t0.addingTimeInterval(11)
        let summary = FleetBundleSummary(view: view, own: ["com.example.mine", "com.example.app"], held: ["com.example.mine"], now: now, limit: 5, listLimit: 3)
        // Every bundle of forged instance n counts n jobs: the last one kept counts most.
        let last = try #require(view.live(now: now).filter { $0.id.hasPrefix("forged-") }.max { $0.bundles.first!.value.delivered < $1.bundles.first!.value.delivered })
        let forgedTop = Array(last.bundles.keys.sorted().prefix(3))
        #expect(Array(summary.shown.prefix(4)) == ["com.example.mine", "com.example.app", "com.example.busy", "com.example.quiet"])
        #expect(Array(summary.shown.dropFirst(4)) == forgedTop, "then by jobs since start, then by ID")
        let distinct = Set(view.live(now: now).flatMap(\.bundles.keys)).union(["com.example.mine"])
        #expect(summary.notShown == distinct.count - summary.shown.count && summary.notShown > 10_000)
        // Sums of the drawn bundles only, not of every bundle the view holds.
        #expect(Set(summary.totals.keys) == Set(summary.shown).subtracting(["com.example.mine"]))
        #expect(summary.totals["com.example.app"]?.delivered == 5)
        #expect(summary.held == ["com.example.mine", "com.example.quiet"] && summary.heldCount == 2)
        #expect(FleetBundleSummary.named(["a", "b", "c", "d"], limit: 2) == "a, b and 2 more")
        #expect(FleetBundleSummary.named(["a"], count: 40, limit: 2) == "a and 39 more")
        #expect(FleetBundleSummary.named(["a", "b"]) == "a, b")
        #expect(FleetBundleSummary.named([String](), count: 3, limit: 0) == "3 more")
    }

    @Test func heldBundlesBeyondTheDrawnOnesAreCountedAndNamedUpToTheLimit() {
        var view = FleetView()
        var forged = FleetTests.instance("forged")
        forged.bundles = Dictionary(uniqueKeysWithValues: (0..<300).map { (String(format: "com.forged.b%03d", $0), FleetInstance.Bundle(held: true)) })
        view.received(forged, at: Self.t0)
        let summary = FleetBundleSummary(view: view, own: [], now: Self.t0, limit: 2)
        #expect(summary.shown == ["com.forged.b000", "com.forged.b001"] && summary.notShown == 298)
        #expect(summary.heldCount == 300 && summary.held == (0..<10).map { String(format: "com.forged.b%03d", $0) })
    }

    @Test func theGraphsFleetWideSeriesIsEveryBundlesWorkIncludingThosePastABucketsLimit() {
        var rates = FleetRates()
        let many = FleetRates.maxBundlesPerBucket + 200
        rates.record(instance: "i", counts: Dictionary(uniqueKeysWithValues: (0..<many).map { ("b\($0)", [JobEnd.delivered: 0]) }), at: Self.t0)
        rates.record(instance: "i", counts: Dictionary(uniqueKeysWithValues: (0..<many).map { ("b\($0)", [JobEnd.delivered: 3, .dead: 1]) }), at: Self.t0.addingTimeInterval(1))
        let point = rates.series(now: Self.t0.addingTimeInterval(10)).last
        #expect(point?.perSecond[.delivered] == Double(3 * many) / 10)
        #expect(point?.perSecond[.dead] == Double(many) / 10)
        #expect(rates.recent(now: Self.t0.addingTimeInterval(1))[.dead] == many)
        let recent = rates.recentJobsByBundle(now: Self.t0.addingTimeInterval(1))
        #expect(recent.count == FleetRates.maxBundlesPerBucket && recent.values.allSatisfy { $0 == 4 })
        #expect(recent[FleetRates.otherBundles] == nil)
    }
}
