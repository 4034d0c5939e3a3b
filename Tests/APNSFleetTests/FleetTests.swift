import APNSFleet
import APNSModel
import Foundation
import Testing

/// The fleet's pure parts: the heartbeat's wire form, who is live and when an instance is
/// forgotten, fleet totals, jobs per second over 15 minutes, and the queue latency estimate.
struct FleetTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    static func instance(_ id: String, interval: Double = 5, delivered: Int = 0, dead: Int = 0, bundle: String = "com.example.app", held: Bool = false) -> FleetInstance {
        FleetInstance(
            id: id, host: "host-\(id)", pid: 100, version: "0.1.0", startedAt: t0, rssBytes: 1 << 20, cpuSeconds: 1.5,
            broker: "connected", heartbeatInterval: interval,
            bundles: [bundle: FleetInstance.Bundle(delivered: delivered, dead: dead, inFlight: 2, held: held)])
    }

    @Test func heartbeatRoundTripsThroughItsWireForm() throws {
        var sent = Self.instance("a", delivered: 7)
        sent.bundles["com.example.app"]?.lastTakenPublishedAt = Self.t0
        let decoded = FleetMessage.decode(FleetMessage.heartbeat(sent).encoded())
        #expect(decoded == .heartbeat(sent))
        #expect(FleetMessage.decode(FleetMessage.pause(bundleID: "com.example.app").encoded()) == .pause(bundleID: "com.example.app"))
        #expect(FleetMessage.decode(FleetMessage.resume(bundleID: "b").encoded()) == .resume(bundleID: "b"))
        // The wire uses the contract's field names and RFC 3339 dates.
        let text = String(decoding: FleetMessage.heartbeat(sent).encoded(), as: UTF8.self)
        #expect(text.contains(#""startedAt":"2027-01-15T08:00:00Z""#))
        #expect(text.contains(#""invalidToken":0"#))
        #expect(text.contains(#""kind":"heartbeat""#))
    }

    @Test func foreignOrBrokenMessagesAreIgnored() {
        #expect(FleetMessage.decode(Array("not json".utf8)) == nil)
        #expect(FleetMessage.decode(Array(#"{"kind":"reboot"}"#.utf8)) == nil)
        #expect(FleetMessage.decode(Array(#"{"kind":"pause"}"#.utf8)) == nil)
        #expect(FleetMessage.decode(Array(#"{"kind":"pause","bundleId":""}"#.utf8)) == nil)
        #expect(FleetMessage.decode(Array(#"{"kind":"heartbeat"}"#.utf8)) == nil)
    }

    @Test func anInstanceSilentForThreeIntervalsIsForgotten() {
        var view = FleetView()
        view.received(Self.instance("a", interval: 5), at: Self.t0)
        view.received(Self.instance("b", interval: 1), at: Self.t0)
        #expect(view.live(now: Self.t0).map(\.id) == ["a", "b"])
        #expect(view.live(now: Self.t0)[0].lastSeen == Self.t0)
        // Three intervals exactly: still there; a moment later: gone. Each by its own interval.
        #expect(view.expire(now: Self.t0.addingTimeInterval(3)) == [])
        #expect(view.live(now: Self.t0.addingTimeInterval(3.5)).map(\.id) == ["a"])
        #expect(view.expire(now: Self.t0.addingTimeInterval(3.5)) == ["b"])
        #expect(view.live(now: Self.t0.addingTimeInterval(15)).map(\.id) == ["a"])
        // A new heartbeat keeps it alive.
        view.received(Self.instance("a", interval: 5), at: Self.t0.addingTimeInterval(14))
        #expect(view.expire(now: Self.t0.addingTimeInterval(28)) == [])
        #expect(view.expire(now: Self.t0.addingTimeInterval(29.5)) == ["a"])
        #expect(view.live(now: Self.t0.addingTimeInterval(29.5)).isEmpty)
        // A heartbeat that claims an endless interval is kept no longer than the longest real one.
        view.received(Self.instance("forever", interval: 1e12), at: Self.t0)
        #expect(view.expire(now: Self.t0.addingTimeInterval(3 * 300)) == [])
        #expect(view.expire(now: Self.t0.addingTimeInterval(3 * 300 + 1)) == ["forever"])
    }

    @Test func totalsSumTheLiveInstances() {
        var view = FleetView()
        view.received(Self.instance("a", delivered: 10, dead: 1), at: Self.t0)
        view.received(Self.instance("b", delivered: 32, held: true), at: Self.t0)
        view.received(Self.instance("c", delivered: 5, bundle: "com.example.other"), at: Self.t0)
        let totals = view.totals(now: Self.t0)
        #expect(totals["com.example.app"]?.delivered == 42)
        #expect(totals["com.example.app"]?.dead == 1)
        #expect(totals["com.example.app"]?.inFlight == 4)
        #expect(totals["com.example.app"]?.held == true)
        #expect(totals["com.example.other"]?.delivered == 5)
        #expect(totals["com.example.other"]?.held == false)
        // Once b is silent, its counts leave the totals with it.
        view.received(Self.instance("a", delivered: 10, dead: 1), at: Self.t0.addingTimeInterval(14))
        #expect(view.totals(now: Self.t0.addingTimeInterval(16))["com.example.app"]?.delivered == 10)
    }

    @Test func ratesCountTheWorkBetweenHeartbeats() {
        var rates = FleetRates(bucketSeconds: 10, windowSeconds: 900)
        let counts = { (delivered: Int, dead: Int) in ["b": [JobEnd.delivered: delivered, .dead: dead]] }
        // The first heartbeat is a baseline only: an instance may have run for hours.
        rates.record(instance: "a", counts: counts(1000, 5), at: Self.t0)
        #expect(rates.series(now: Self.t0).last?.perSecond[.delivered] == 0)
        rates.record(instance: "a", counts: counts(1050, 5), at: Self.t0.addingTimeInterval(5))
        rates.record(instance: "b", counts: counts(0, 0), at: Self.t0.addingTimeInterval(5))
        rates.record(instance: "b", counts: counts(30, 10), at: Self.t0.addingTimeInterval(9))
        // The bucket still filling is not drawn; once it is complete it is the last point.
        #expect(rates.series(now: Self.t0.addingTimeInterval(9)).last?.perSecond[.delivered] == 0)
        let series = rates.series(now: Self.t0.addingTimeInterval(10))
        #expect(series.count == 90)
        #expect(series.last?.perSecond[.delivered] == 8)  // (50 + 30) / 10 s
        #expect(series.last?.perSecond[.dead] == 1)
        #expect(series.last?.perSecond[.retry] == 0)
        #expect(rates.recent(now: Self.t0.addingTimeInterval(9), bundleID: "b")[.delivered] == 80)
        #expect(rates.recent(now: Self.t0.addingTimeInterval(9), bundleID: "other")[.delivered] == 0)
        // Points are 10 s apart.
        #expect(series[89].start.timeIntervalSince(series[88].start) == 10)
        #expect(series[89].start == Self.t0)
        // 15 minutes later the work has left the window.
        let later = rates.series(now: Self.t0.addingTimeInterval(15 * 60 + 10))
        #expect(later.allSatisfy { $0.perSecond[.delivered] == 0 })
    }

    @Test func aForgottenInstanceStartsFromANewBaseline() {
        var rates = FleetRates()
        rates.record(instance: "a", counts: ["b": [.delivered: 10]], at: Self.t0)
        rates.forget(instance: "a")
        rates.record(instance: "a", counts: ["b": [.delivered: 500]], at: Self.t0.addingTimeInterval(1))
        #expect(rates.recent(now: Self.t0.addingTimeInterval(1))[.delivered] == 0)
        // A count that went down (never within one process) adds nothing rather than a negative rate.
        rates.record(instance: "a", counts: ["b": [.delivered: 3]], at: Self.t0.addingTimeInterval(2))
        #expect(rates.recent(now: Self.t0.addingTimeInterval(2))[.delivered] == 0)
    }

    @Test func queueLatencyFromTheNewestTakenJob() {
        let now = Self.t0.addingTimeInterval(90)
        #expect(QueueLatency.estimate(ready: 0, consumers: 2, lastTakenPublishedAt: Self.t0, now: now) == .empty)
        #expect(QueueLatency.estimate(ready: 5, consumers: 2, lastTakenPublishedAt: Self.t0, now: now) == .about(.seconds(90)))
        #expect(QueueLatency.estimate(ready: 5, consumers: 0, lastTakenPublishedAt: Self.t0, now: now) == .atMost(.seconds(90)))
        #expect(QueueLatency.estimate(ready: 5, consumers: 1, lastTakenPublishedAt: nil, now: now) == .unknown)
        #expect(QueueLatency.about(.seconds(90)).text == "≈ 90 s")
        #expect(QueueLatency.atMost(.seconds(600)).text == "≤ 10 min")
        #expect(QueueLatency.about(.seconds(3 * 3600)).text == "≈ 3 h")
    }

}
