import APNSFleet
import APNSModel
import Foundation
import Testing

/// Forged and damaged heartbeats (contract §4 "Hostile and damaged input", §5): anyone on the
/// vhost can publish on `apns.fleet`, so no heartbeat may trap a listener, and the view stays
/// bounded and says what it dropped.
struct FleetHostileInputTests {
    static let t0 = FleetTests.t0

    static func wire(_ instance: FleetInstance) -> [UInt8] { FleetMessage.heartbeat(instance).encoded() }

    @Test func extremeCountsThenZeroDoNotTrapAndAreIgnored() {
        var view = FleetView()
        let forged = FleetTests.instance("forger", delivered: Int.min)
        // Before the fix this pair trapped in `count - previous` (FleetRates) on every listener.
        #expect(FleetMessage.decode(Self.wire(forged)) == nil)
        #expect(view.received(forged, at: Self.t0) == .ignored)
        #expect(view.received(FleetTests.instance("forger", delivered: 0), at: Self.t0.addingTimeInterval(1)) == .kept)
        #expect(view.received(FleetTests.instance("forger", delivered: Int.max), at: Self.t0.addingTimeInterval(2)) == .ignored)
        #expect(view.dropped.ignored == 2)
        #expect(view.rates.recent(now: Self.t0.addingTimeInterval(2))[.delivered] == 0)
    }

    @Test func countsFromZeroTo2To53AreKeptAndSummedWithoutOverflow() {
        var view = FleetView()
        let top = UntrustedText.maxCount
        #expect(view.received(FleetTests.instance("a", delivered: 0), at: Self.t0) == .kept)
        #expect(view.received(FleetTests.instance("a", delivered: top), at: Self.t0.addingTimeInterval(1)) == .kept)
        #expect(view.received(FleetTests.instance("a", delivered: top + 1), at: Self.t0.addingTimeInterval(2)) == .ignored)
        #expect(view.received(FleetTests.instance("a", delivered: -1), at: Self.t0.addingTimeInterval(2)) == .ignored)
        #expect(view.rates.recent(now: Self.t0.addingTimeInterval(2))[.delivered] == top)
        #expect(view.totals(now: Self.t0.addingTimeInterval(2))["com.example.app"]?.delivered == top)
    }

    @Test func ratesNeverTrapWhateverTheyAreGiven() {
        var rates = FleetRates()
        let edges = [Int.min, -1, 0, 1, Int.max, Int.min, Int.max, Int.max]
        for (second, count) in edges.enumerated() {
            rates.record(instance: "x", counts: ["b": [.delivered: count]], at: Self.t0.addingTimeInterval(Double(second) / 10))
            rates.record(instance: "y", counts: ["b": [.delivered: count]], at: Self.t0.addingTimeInterval(Double(second) / 10))
        }
        // Both went 0 → 1 → Int.max (1 + (Int.max - 1)), twice; the bucket saturates instead of trapping.
        #expect(rates.recent(now: Self.t0)[.delivered] == Int.max)
    }

    @Test func textFieldsAreBoundedAndFreeOfControlCharacters() {
        let good = FleetTests.instance("a")
        #expect(FleetMessage.decode(Self.wire(good)) == .heartbeat(good))
        let changes: [(inout FleetInstance) -> Void] = [
            { $0.id = "" },
            { $0.id = String(repeating: "i", count: FleetInstance.maxIDBytes + 1) },
            { $0.id = "evil\u{0}id" },
            { $0.host = "line\nbreak" },
            { $0.host = String(repeating: "h", count: FleetInstance.maxHostBytes + 1) },
            { $0.version = String(repeating: "v", count: FleetInstance.maxVersionBytes + 1) },
            { $0.version = "1.0\u{85}" },
            { $0.broker = "connected\u{7F}" },
            { $0.pid = -1 },
            { $0.rssBytes = -5 },
            { $0.cpuSeconds = -1 },
            { $0.heartbeatInterval = 0 },
            { $0.heartbeatInterval = -5 },
            { $0.bundles = ["": FleetInstance.Bundle()] },
            { $0.bundles = ["com.bad\r\nbundle": FleetInstance.Bundle()] },
            { $0.bundles["com.example.app"]?.inFlight = -1 },
            { $0.bundles["com.example.app"]?.gated = UntrustedText.maxCount + 1 },
            { $0.bundles["com.example.app"]?.connections = ["ready": -1] },
            { $0.bundles["com.example.app"]?.connections = ["bad\u{1}state": 1] },
            {
                $0.bundles["com.example.app"]?.connections = Dictionary(
                    uniqueKeysWithValues: (0...FleetInstance.maxConnectionStates).map { ("s\($0)", 1) })
            },
        ]
        var cases: [FleetInstance] = []
        for change in changes {
            var instance = good
            change(&instance)
            cases.append(instance)
        }
        var view = FleetView()
        for (index, instance) in cases.enumerated() {
            #expect(FleetMessage.decode(Self.wire(instance)) == nil, "case \(index) decoded")
            #expect(view.received(instance, at: Self.t0) == .ignored, "case \(index) kept")
        }
        #expect(view.live(now: Self.t0).isEmpty)
        #expect(view.dropped.ignored == cases.count)
    }

    @Test func nonFiniteNumbersOnTheWireAreIgnored() {
        let good = String(decoding: Self.wire(FleetTests.instance("a")), as: UTF8.self)
        for (field, value) in [("cpuSeconds", "1e400"), ("heartbeatInterval", "-1e400"), ("pid", "99999999999"), ("rssBytes", "1.5")] {
            let text = good.replacingOccurrences(of: #""\#(field)":"#, with: #""\#(field)":\#(value),"x\#(field)":"#)
            #expect(FleetMessage.decode(Array(text.utf8)) == nil, "\(field) = \(value)")
        }
        #expect(FleetMessage.decode([UInt8](repeating: 0x20, count: FleetMessage.maxBodyBytes + 1)) == nil)
        #expect(FleetMessage.decode(FleetMessage.pause(bundleID: "com.x\u{0}").encoded()) == nil)
    }

    @Test func theViewKeepsAtMostAThousandInstancesAndSaysSo() {
        var view = FleetView()
        for n in 0..<FleetView.maxInstances { #expect(view.received(FleetTests.instance("i\(n)"), at: Self.t0) == .kept) }
        #expect(view.received(FleetTests.instance("one-too-many"), at: Self.t0) == .droppedInstance)
        // Known instances still beat.
        #expect(view.received(FleetTests.instance("i0", delivered: 3), at: Self.t0.addingTimeInterval(1)) == .kept)
        #expect(view.live(now: Self.t0.addingTimeInterval(1)).count == FleetView.maxInstances)
        #expect(view.dropped == FleetDrops(instances: 1, bundles: 0, ignored: 0))
        // Once they fall silent, there is room again.
        view.expire(now: Self.t0.addingTimeInterval(60))
        #expect(view.received(FleetTests.instance("late"), at: Self.t0.addingTimeInterval(60)) == .kept)
    }

    @Test func theViewKeepsAtMostAThousandBundlesOfAnInstance() throws {
        var instance = FleetTests.instance("wide")
        instance.bundles = Dictionary(
            uniqueKeysWithValues: (0..<(FleetView.maxBundlesPerInstance + 5)).map { (String(format: "b%05d", $0), FleetInstance.Bundle(delivered: 1)) })
        var view = FleetView()
        #expect(view.received(instance, at: Self.t0) == .keptDroppingBundles(5))
        let kept = try #require(view.live(now: Self.t0).first)
        #expect(kept.bundles.count == FleetView.maxBundlesPerInstance)
        #expect(kept.bundles["b00000"] != nil && kept.bundles["b01004"] == nil)
        #expect(view.dropped.bundles == 5)
    }

    @Test func ratesKeepAThousandBundlesPerBucketAndCountTheRestFleetWide() {
        var rates = FleetRates()
        let many = 1500
        let zero = Dictionary(uniqueKeysWithValues: (0..<many).map { ("b\($0)", [JobEnd.delivered: 0]) })
        let one = Dictionary(uniqueKeysWithValues: (0..<many).map { ("b\($0)", [JobEnd.delivered: 1]) })
        rates.record(instance: "a", counts: zero, at: Self.t0)
        rates.record(instance: "a", counts: one, at: Self.t0.addingTimeInterval(1))
        #expect(rates.recent(now: Self.t0.addingTimeInterval(1))[.delivered] == many)
        let separately = (0..<many).filter { rates.recent(now: Self.t0.addingTimeInterval(1), bundleID: "b\($0)")[.delivered] == 1 }
        #expect(separately.count == FleetRates.maxBundlesPerBucket)
    }

    /// A bundle key of exactly `FleetInstance.maxBundleKeyBytes` bytes, distinct per `n`.
    static func longKey(_ n: Int, prefix: String = "k") -> String {
        let head = "\(prefix)\(n)."
        return head + String(repeating: "x", count: FleetInstance.maxBundleKeyBytes - head.utf8.count)
    }

    /// 1,000 forged instances of 1,000 bundles with 255-byte keys were all
    /// kept, over 255 MB of keys alone on every instance. The view keeps what fits in 16 MiB by
    /// its own account, says what it dropped, and a real instance it knew keeps beating.
    @Test func aThousandForgedInstancesOfAThousandLongBundlesStayWithinSixteenMiB() throws {
        var view = FleetView()
        #expect(view.received(FleetTests.instance("real", delivered: 1), at: Self.t0) == .kept)
        // One dictionary shared by every forged heartbeat (copy on write): the test's own memory stays small.
        let bundles = Dictionary(uniqueKeysWithValues: (0..<FleetView.maxBundlesPerInstance).map {
            (Self.longKey($0), FleetInstance.Bundle(delivered: 1, connections: ["ready": 1]))
        })
        var admissions: [FleetView.Admission: Int] = [:]
        for n in 0..<FleetView.maxInstances {
            var forged = FleetTests.instance("forged-\(n)")
            forged.bundles = bundles
            let admission = view.received(forged, at: Self.t0)
            switch admission {
            case .keptDroppingBundles: admissions[.keptDroppingBundles(0), default: 0] += 1
            default: admissions[admission, default: 0] += 1
            }
        }
        let now = Self.t0.addingTimeInterval(1)
        let live = view.live(now: now)
        let keyBytes = live.reduce(0) { sum, instance in sum + instance.bundles.keys.reduce(0) { $0 + $1.utf8.count } }
        #expect(keyBytes < FleetView.maxBytes, "\(keyBytes) bytes of bundle keys kept")
        #expect(view.bytes <= FleetView.accountedBytes && FleetView.accountedBytes < FleetView.maxBytes)
        #expect(view.instanceBytes <= FleetView.maxInstanceBytes)
        // The estimate counts at least the keys and the bundles' slots.
        let bundleEntries = live.reduce(0) { $0 + $1.bundles.count }
        #expect(view.instanceBytes >= keyBytes + bundleEntries * MemoryLayout<FleetInstance.Bundle>.stride)
        #expect(admissions[.kept, default: 0] > 0)
        #expect(admissions[.keptDroppingBundles(0), default: 0] >= 1)
        #expect(admissions[.droppedInstance, default: 0] > 0)
        #expect(view.dropped.instances == admissions[.droppedInstance, default: 0])
        #expect(view.dropped.bundles > 0)
        // The real instance was known before the flood: it is still kept, and still beats.
        #expect(view.received(FleetTests.instance("real", delivered: 2), at: now) == .kept)
        #expect(view.totals(now: now)["com.example.app"]?.delivered == 2 + 0)
        // The forged ones go silent: their bytes are given back.
        view.expire(now: Self.t0.addingTimeInterval(60))
        #expect(view.live(now: Self.t0.addingTimeInterval(60)).isEmpty)
        #expect(view.instanceBytes == 0)
    }

    /// A known instance whose heartbeat grows is kept within the bytes that are left, its
    /// first bundles by bundle ID, with the rest counted.
    @Test func aKnownInstanceKeepsItsFirstBundlesThatFit() throws {
        var view = FleetView()
        let keys = (0..<FleetView.maxBundlesPerInstance).map { Self.longKey($0, prefix: "w") }
        var wide = FleetTests.instance("wide")
        wide.bundles = Dictionary(uniqueKeysWithValues: keys.map { ($0, FleetInstance.Bundle(delivered: 1)) })
        #expect(view.received(wide, at: Self.t0) == .kept)
        let fillers = Dictionary(uniqueKeysWithValues: (0..<FleetView.maxBundlesPerInstance).map {
            (Self.longKey($0), FleetInstance.Bundle(delivered: 1))
        })
        for n in 0..<100 {
            var filler = FleetTests.instance("filler-\(n)")
            filler.bundles = fillers
            guard view.received(filler, at: Self.t0) == .kept else { break }
        }
        // The same bundles, each now with 16 connection states: it no longer fits whole.
        let states = Dictionary(uniqueKeysWithValues: (0..<FleetInstance.maxConnectionStates).map { (String(repeating: "s", count: 40) + "\($0)", 1) })
        wide.bundles = Dictionary(uniqueKeysWithValues: keys.map { ($0, FleetInstance.Bundle(delivered: 2, connections: states)) })
        guard case .keptDroppingBundles(let dropped) = view.received(wide, at: Self.t0.addingTimeInterval(1)) else {
            Issue.record("the grown heartbeat was kept whole, or not at all")
            return
        }
        let kept = try #require(view.live(now: Self.t0.addingTimeInterval(1)).first { $0.id == "wide" })
        #expect(dropped > 0 && kept.bundles.count + dropped == FleetView.maxBundlesPerInstance)
        #expect(kept.bundles.keys.sorted() == Array(keys.sorted().prefix(kept.bundles.count)))
        #expect(kept.bundles.values.allSatisfy { $0.delivered == 2 })
        #expect(view.instanceBytes <= FleetView.maxInstanceBytes)
    }

    /// Contract §5: a heartbeat larger than 64 KiB is ignored, and an instance's own heartbeat
    /// is kept within it (its first bundles by ID) rather than ignored by every listener.
    @Test func aHeartbeatOver64KiBIsIgnoredAndAnInstanceSendsOneThatFits() throws {
        var wide = FleetTests.instance("wide")
        wide.bundles = Dictionary(uniqueKeysWithValues: (0..<1000).map { (String(format: "com.example.app%04d", $0), FleetInstance.Bundle(delivered: $0)) })
        let whole = FleetMessage.heartbeat(wide).encoded()
        #expect(whole.count > FleetMessage.maxBodyBytes)
        #expect(FleetMessage.maxBodyBytes == 64 * 1024)
        #expect(FleetMessage.decode(whole) == nil)
        let (body, leftOut) = FleetMessage.heartbeatBody(wide)
        #expect(body.count <= FleetMessage.maxBodyBytes)
        #expect(leftOut > 0)
        guard case .heartbeat(let sent) = FleetMessage.decode(body) else {
            Issue.record("the trimmed heartbeat does not decode")
            return
        }
        #expect(sent.bundles.count == 1000 - leftOut)
        #expect(sent.bundles.keys.sorted() == Array(wide.bundles.keys.sorted().prefix(sent.bundles.count)))
        // One more bundle would not have fitted.
        var more = sent
        let next = wide.bundles.keys.sorted()[sent.bundles.count]
        more.bundles[next] = wide.bundles[next]
        #expect(FleetMessage.heartbeat(more).encoded().count > FleetMessage.maxBodyBytes)
        // A heartbeat that fits goes whole.
        let small = FleetTests.instance("small")
        #expect(FleetMessage.heartbeatBody(small).body == FleetMessage.heartbeat(small).encoded())
        #expect(FleetMessage.heartbeatBody(small).leftOut == 0)
    }

    /// The graph's history is bounded in bytes too: 90 buckets of 1,000 distinct 255-byte
    /// bundles each would be about 50 MB. Past its share the work still counts fleet-wide.
    @Test func theRatesHistoryStaysWithinItsBytesAndStillCountsEveryJob() {
        var rates = FleetRates()
        let perBucket = FleetRates.maxBundlesPerBucket
        for bucket in 0..<rates.bucketCount {
            let at = Self.t0.addingTimeInterval(Double(bucket * rates.bucketSeconds))
            let keys = (0..<perBucket).map { Self.longKey(bucket * perBucket + $0) }
            rates.record(instance: "i\(bucket)", counts: Dictionary(uniqueKeysWithValues: keys.map { ($0, [JobEnd.delivered: 0]) }), at: at)
            rates.record(instance: "i\(bucket)", counts: Dictionary(uniqueKeysWithValues: keys.map { ($0, [JobEnd.delivered: 1]) }), at: at)
            #expect(rates.bytes <= FleetRates.maxBytes)
        }
        let end = Self.t0.addingTimeInterval(Double(rates.bucketCount * rates.bucketSeconds))
        let total = rates.series(now: end).reduce(0.0) { $0 + ($1.perSecond[.delivered] ?? 0) * Double(rates.bucketSeconds) }
        #expect(total == Double(rates.bucketCount * perBucket))
        // The last bucket had no room left for bundles of its own: they count under the rest.
        let lastKey = Self.longKey((rates.bucketCount - 1) * perBucket)
        #expect(rates.recent(now: end.addingTimeInterval(-1), seconds: 10, bundleID: lastKey)[.delivered] == 0)
        #expect(rates.recent(now: end.addingTimeInterval(-1), seconds: 10)[.delivered] == perBucket)
        // Buckets that leave the window give their bytes back.
        rates.record(instance: "late", counts: [:], at: end.addingTimeInterval(2000))
        rates.record(instance: "late", counts: [:], at: end.addingTimeInterval(2000))
        #expect(rates.bytes < 1024, "one empty bucket left: \(rates.bytes) bytes")
    }

    /// A heartbeat's `lastTakenPublishedAt` at `UInt64.max` seconds was the
    /// newest, so the fleet's queue latency read 0 s while the forger lived. It is not believed.
    @Test func aPublishTimeFarAheadIsNotBelieved() throws {
        let farAhead = Date(timeIntervalSince1970: TimeInterval(UInt64.max))
        #expect(QueueLatency.believable(farAhead, now: Self.t0) == nil)
        #expect(QueueLatency.believable(Self.t0.addingTimeInterval(60), now: Self.t0) == Self.t0.addingTimeInterval(60))
        #expect(QueueLatency.believable(Self.t0.addingTimeInterval(-86_400), now: Self.t0) == Self.t0.addingTimeInterval(-86_400))
        var view = FleetView()
        var forged = FleetTests.instance("forger")
        forged.bundles["com.example.app"]?.lastTakenPublishedAt = farAhead
        var real = FleetTests.instance("real")
        real.bundles["com.example.app"]?.lastTakenPublishedAt = Self.t0.addingTimeInterval(-30)
        view.received(forged, at: Self.t0)
        view.received(real, at: Self.t0)
        let taken = try #require(view.totals(now: Self.t0)["com.example.app"]?.lastTakenPublishedAt)
        #expect(taken == Self.t0.addingTimeInterval(-30))
        #expect(QueueLatency.estimate(ready: 3, consumers: 1, lastTakenPublishedAt: taken, now: Self.t0) == .about(.seconds(30)))
    }
}

