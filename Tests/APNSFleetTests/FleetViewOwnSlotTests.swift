import APNSFleet
import APNSModel
import Foundation
import Testing

/// A listener's own instance keeps its place in its view: forged heartbeats that fill the view
/// (1,000 made-up instances, or megabytes of long bundle keys) turned the instance itself away,
/// so its page and `GET /api/fleet` lost it until the forgeries expired (up to 15 minutes). The
/// view still keeps at most 1,000 instances and its bytes (contract §5).
struct FleetViewOwnSlotTests {
    static let t0 = FleetHostileInputTests.t0

    @Test func aThousandForgedInstancesLeaveThePlaceOfTheOwnOne() {
        var view = FleetView(reservedFor: "me")
        for n in 0..<(FleetView.maxInstances - 1) { #expect(view.received(FleetTests.instance("f\(n)"), at: Self.t0) == .kept) }
        #expect(view.received(FleetTests.instance("one-too-many"), at: Self.t0) == .droppedInstance)
        #expect(view.received(FleetTests.instance("me"), at: Self.t0) == .kept)
        #expect(view.live(now: Self.t0).count == FleetView.maxInstances)
        // The place is taken: nobody new, and the own instance keeps beating.
        #expect(view.received(FleetTests.instance("another"), at: Self.t0) == .droppedInstance)
        #expect(view.received(FleetTests.instance("me", delivered: 5), at: Self.t0.addingTimeInterval(1)) == .kept)
        // A view without an own instance (the CLI's) keeps a thousand others, as before.
        var cli = FleetView()
        for n in 0..<FleetView.maxInstances { #expect(cli.received(FleetTests.instance("f\(n)"), at: Self.t0) == .kept) }
    }

    @Test func forgedBundlesThatFillTheBytesLeaveRoomForTheOwnInstance() throws {
        var view = FleetView(reservedFor: "me")
        let bundles = Dictionary(uniqueKeysWithValues: (0..<FleetView.maxBundlesPerInstance).map {
            (FleetHostileInputTests.longKey($0), FleetInstance.Bundle(delivered: 1, connections: ["ready": 1]))
        })
        for n in 0..<FleetView.maxInstances {
            var forged = FleetTests.instance("forged-\(n)")
            forged.bundles = bundles
            view.received(forged, at: Self.t0)
        }
        #expect(view.dropped.instances > 0, "the forgeries filled the view's bytes")
        // The own heartbeat at its largest: 1,000 bundles with 155-byte IDs.
        var me = FleetTests.instance("me")
        me.bundles = Dictionary(uniqueKeysWithValues: (0..<FleetView.maxBundlesPerInstance).map { n in
            let head = "com.\(n)."
            return (head + String(repeating: "x", count: UntrustedText.maxBundleIDBytes - head.utf8.count), FleetInstance.Bundle(delivered: 1, connections: ["ready": 2]))
        })
        #expect(view.received(me, at: Self.t0) == .kept, "whole, not cut")
        #expect(view.instanceBytes <= FleetView.maxInstanceBytes)
        #expect(view.live(now: Self.t0).contains { $0.id == "me" })
    }
}
