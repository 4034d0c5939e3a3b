import APNSFleet
import APNSWorker
import Foundation
import Testing

/// Which pause markers `apns-worker fleet` reads: forged heartbeats name any bundle keys, and a
/// key longer than a queue name allows broke the CLI's connection (the broker's short string is
/// 255 bytes), while a flood of names made one report as many broker round trips.
struct FleetPauseChecksTests {
    static func instance(_ id: String, _ bundles: [String: Bool]) -> FleetInstance {
        FleetInstance(
            id: id, host: "h", pid: 1, version: "0.1.0", startedAt: Date(), rssBytes: 1, cpuSeconds: 0, broker: "connected",
            heartbeatInterval: 5, bundles: bundles.mapValues { FleetInstance.Bundle(paused: $0) })
    }

    @Test func aKeyThatCannotNameAMarkerIsNotChecked() {
        let long = "forged." + String(repeating: "x", count: FleetInstance.maxBundleKeyBytes - 7)
        let live = [Self.instance("a", [long: true, "with space": false, "com.example.real": false])]
        let checks = FleetControl.pauseChecks(configured: ["com.example.configured", "bad name"], live: live)
        #expect(checks.bundleIDs == ["com.example.configured", "com.example.real"])
        #expect(checks.leftOut == 0)
    }

    @Test func aFloodOfNamesIsCappedConfiguredAndReportedPausedFirst() {
        let flood = (0..<3_000).map { "com.forged.\($0)" }
        let forger = Self.instance("forger", Dictionary(uniqueKeysWithValues: flood.map { ($0, false) }))
        let real = Self.instance("real", ["zz.paused.app": true, "com.example.running": false])
        let checks = FleetControl.pauseChecks(configured: ["com.example.running"], live: [forger, real])
        #expect(checks.bundleIDs.count == FleetControl.maxPauseChecks)
        #expect(Array(checks.bundleIDs.prefix(2)) == ["com.example.running", "zz.paused.app"])
        #expect(Set(checks.bundleIDs).count == checks.bundleIDs.count, "each bundle once")
        #expect(checks.leftOut == 3_002 - FleetControl.maxPauseChecks)
    }
}
