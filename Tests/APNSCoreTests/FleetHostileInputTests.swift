import APNSCore
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
        let zero = Dictionary(uniqueKeysWithValues: (0..<many).map { ("b\($0)", [FleetEnd.delivered: 0]) })
        let one = Dictionary(uniqueKeysWithValues: (0..<many).map { ("b\($0)", [FleetEnd.delivered: 1]) })
        rates.record(instance: "a", counts: zero, at: Self.t0)
        rates.record(instance: "a", counts: one, at: Self.t0.addingTimeInterval(1))
        #expect(rates.recent(now: Self.t0.addingTimeInterval(1))[.delivered] == many)
        let separately = (0..<many).filter { rates.recent(now: Self.t0.addingTimeInterval(1), bundleID: "b\($0)")[.delivered] == 1 }
        #expect(separately.count == FleetRates.maxBundlesPerBucket)
    }
}
