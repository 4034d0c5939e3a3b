@testable import APNSAdmin
import APNSFleet
import APNSModel
import Foundation
import Testing

/// The live graph's geometry, without a server: axis scale, where each point lands, labels
/// that read without colour, and values that stay text.
struct FleetGraphTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    static func points(_ rates: [Double], end: JobEnd = .delivered) -> [FleetRates.Point] {
        rates.enumerated().map { index, rate in
            var perSecond = Dictionary(uniqueKeysWithValues: JobEnd.fleetEnds.map { ($0, 0.0) })
            perSecond[end] = rate
            return FleetRates.Point(start: t0.addingTimeInterval(Double(index * 10)), perSecond: perSecond)
        }
    }

    @Test func theAxisEndsAtARoundNumberAboveTheHighestRate() {
        #expect(FleetGraph.niceCeiling(1) == 1)
        #expect(FleetGraph.niceCeiling(1.3) == 2)
        #expect(FleetGraph.niceCeiling(37) == 50)
        #expect(FleetGraph.niceCeiling(50) == 50)
        #expect(FleetGraph.niceCeiling(501) == 1000)
        #expect(FleetGraph(points: Self.points([0, 0, 0])).yMax == 1)
        #expect(FleetGraph(points: Self.points([3, 180, 40])).yMax == 200)
    }

    @Test func pointsSpanThePlotFromLeftToRightAndBottomToTop() {
        let graph = FleetGraph(points: Self.points([0, 100, 200]), width: 500, height: 240, left: 50, right: 50, top: 10, bottom: 30)
        // Plot: x 50...450, y 10...210; yMax 200.
        #expect(graph.polyline(.delivered) == "50.0,210.0 250.0,110.0 450.0,10.0")
        #expect(graph.polyline(.dead) == "50.0,210.0 250.0,210.0 450.0,210.0")
        #expect(graph.yTicks.map(\.label) == ["0/s", "50/s", "100/s", "150/s", "200/s"])
        #expect(FleetGraph(points: Self.points([4])).yTicks.map(\.label) == ["0/s", "1/s", "2/s", "3/s", "4/s", "5/s"])
        #expect(FleetGraph(points: Self.points([0.3])).yTicks.map(\.label) == ["0/s", "0.2/s", "0.4/s", "0.6/s", "0.8/s", "1/s"])
        #expect(graph.yTicks.first?.y == 210)
        #expect(graph.yTicks.last?.y == 10)
    }

    @Test func fifteenMinutesOfPointsHaveTimeLabels() {
        let graph = FleetGraph(points: FleetRates().series(now: Self.t0))
        #expect(graph.points.count == 90)
        #expect(graph.xTicks.map(\.label) == ["-15 min", "-10 min", "-5 min", "now"])
        #expect(graph.xTicks.first?.x == graph.left)
        #expect(graph.xTicks.last?.x == graph.left + graph.plotWidth)
    }

    @Test func everyLineReadsWithoutColour() {
        let svg = FleetGraph(points: Self.points([0, 2.5], end: .retry)).svg()
        #expect(svg.hasPrefix("<svg"))
        #expect(svg.contains(#"id="fleet-graph""#))
        // One line per end, each with a distinct dash pattern, a title and a label with its rate now.
        for style in FleetGraph.styles {
            #expect(svg.contains(#"data-end="\#(style.label)""#))
            #expect(svg.contains("<title>\(style.label)</title>"))
        }
        #expect(Set(FleetGraph.styles.map(\.dash)).count == FleetGraph.styles.count)
        #expect(svg.contains(">retry 2.5/s</text>"))
        #expect(svg.contains(">delivered 0/s</text>"))
        let document = FleetGraph(points: Self.points([1])).document(refresh: 5)
        #expect(document.contains(#"<meta http-equiv="refresh" content="5">"#))
        #expect(document.contains("invalid token</span>"))
        // Nothing to fetch: no script, no external resource.
        #expect(!document.contains("<script"))
        #expect(!document.contains("src="))
        #expect(!document.contains("https://"))
    }

    @Test func lineLabelsNeverOverlap() {
        // Every end at the same rate: the four labels would sit on one spot.
        let points = [FleetRates.Point(start: Self.t0, perSecond: [.delivered: 1, .invalidToken: 1, .retry: 1, .dead: 1])]
        let context = FleetGraph(points: points + points).context
        let ys = (context["series"] as? [[String: Any]] ?? []).compactMap { ($0["labelY"] as? String).flatMap(Double.init) }
        #expect(ys.count == 4)
        for (i, a) in ys.enumerated() { for b in ys[(i + 1)...] { #expect(abs(a - b) >= 13) } }
        // All four at zero, at the bottom of the plot: none is pushed out of the drawing.
        let zeros = FleetGraph(points: FleetRates().series(now: Self.t0))
        let bottom = zeros.labelPositions(Array(repeating: zeros.y(0) + 4, count: 4))
        #expect(bottom.allSatisfy { $0 <= zeros.height - 2 })
        #expect(bottom.sorted() == bottom.sorted().enumerated().map { bottom.max()! - Double(3 - $0.offset) * 13 })
    }

    /// The attack as it was: 13 forged heartbeats of one instance alternating
    /// every count between 0 and 2^53 over 1,000 bundles, in one bucket. Each rise adds 2^53 per
    /// bundle and end; the bucket's sum passed `Int.max` as a Double, and the axis label's
    /// `Int(_:)` trapped on every `/fleet/graph`.
    @Test func theForgedAlternationOverAThousandBundlesDrawsInsteadOfTrapping() throws {
        var view = FleetView()
        let top = UntrustedText.maxCount
        for beat in 0..<13 {
            let count = beat.isMultiple(of: 2) ? 0 : top
            let bundle = FleetInstance.Bundle(delivered: count, invalidToken: count, retry: count, dead: count)
            let forged = FleetInstance(
                id: "forger", host: "forger", pid: 1, version: "6.6.6", startedAt: Self.t0, rssBytes: 1, cpuSeconds: 0,
                broker: "connected", heartbeatInterval: 5,
                bundles: Dictionary(uniqueKeysWithValues: (0..<1000).map { (String(format: "forged.%04d", $0), bundle) }))
            #expect(view.received(forged, at: Self.t0.addingTimeInterval(Double(beat) / 10)) == .kept)
        }
        let points = view.rates.series(now: Self.t0.addingTimeInterval(10))
        let rates = points.flatMap(\.perSecond.values)
        #expect(rates.allSatisfy { $0.isFinite && $0 >= 0 && $0 <= FleetRates.maxPerSecond })
        #expect(try #require(points.last?.perSecond[.dead]) == FleetRates.maxPerSecond)
        #expect(view.rates.recent(now: Self.t0.addingTimeInterval(1))[.delivered] == Int.max)
        let graph = FleetGraph(points: points)
        #expect(graph.yMax == 1e16)
        #expect(graph.yTicks.last?.label == "10000000000000000/s")
        let document = graph.document(refresh: 5)
        #expect(document.contains(">dead 9007199254740992/s</text>"))
    }

    /// Points may be built by hand: whatever they hold, the geometry and labels stay numbers.
    @Test func ratesThatAreNotNumbersOrBeyondTheCapAreDrawnAtTheirBounds() {
        for rate in [Double.nan, -.infinity, -1, .infinity, .greatestFiniteMagnitude, 1e300, Double(Int.max), 2 * Double(Int.max)] {
            let graph = FleetGraph(points: Self.points([rate, 1]))
            #expect(graph.yMax.isFinite && graph.yMax <= 1e16, "\(rate)")
            #expect(graph.polyline(.delivered).allSatisfy { $0 != "n" && $0 != "i" }, "\(rate): \(graph.polyline(.delivered))")
            #expect(!graph.svg().isEmpty)
            #expect(!FleetGraph.rateLabel(rate).isEmpty)
        }
    }
}
