@testable import APNSAdmin
@testable import APNSRegistry
import APNSModel
import Foundation
import Testing

/// The registry page's server-drawn chart and its escaping, without a server or a database.
struct RegistryPageTests {
    let since: Int64 = 1_790_000_000 / 3600 * 3600

    func row(_ hourIndex: Int64, _ end: String, _ count: Int64, bundle: String = "com.example.app") -> CountRow {
        CountRow(bundleId: bundle, hour: since + hourIndex * 3600, end: end, count: count)
    }

    @Test func barsStackByEndAndScaleToTheBusiestHour() {
        let chart = HourlyChart(rows: [row(0, "delivered", 30), row(0, "dead", 10), row(47, "delivered", 40)], since: since)
        #expect(chart.peak == 40)
        // The plot is 150 high (180 less 10 above and 20 below); hour 0's 30 + 10 fill it, stacked.
        #expect(
            chart.segments == [
                .init(hourIndex: 0, end: .delivered, count: 30, y: 47.5, height: 112.5),
                .init(hourIndex: 0, end: .dead, count: 10, y: 10, height: 37.5),
                .init(hourIndex: 47, end: .delivered, count: 40, y: 10, height: 150),
            ])
    }

    /// The page's times by `RFC3339`: the text of the `ISO8601DateFormatter` it had (Foundation's,
    /// ICU's on Linux, is the oracle here), whole seconds rounded down, before 1970 too.
    @Test(arguments: [0, 1_795_769_845_999, -1, -1_500, 1_700_000_000_500, 951_782_400_000, 253_402_300_799_000] as [Int64])
    func timesAreTheTextTheISO8601FormatterWrote(ms: Int64) {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate, .withTime, .withColonSeparatorInTime]
        let old = formatter.string(from: Date(timeIntervalSince1970: TimeInterval(ms) / 1000)).replacingOccurrences(of: "T", with: " ")
        #expect(RegistryPage.time(ms: ms) == old)
        #expect(RegistryPage.time(ms: 1_795_769_845_999) == "2026-11-27 08:57:25")
    }

    @Test func rowsOutsideTheWindowAndUnknownEndsAreLeftOut() {
        let chart = HourlyChart(rows: [row(-1, "delivered", 5), row(48, "delivered", 5), row(3, "exploded", 5)], since: since)
        #expect(chart.segments.isEmpty)
        #expect(chart.peak == 1, "an empty chart scales to 1, never divides by zero")
    }

    @Test func thePageDrawsEveryBundlesChartAndEscapesWhatComesFromOutside() {
        let device = DeviceRecord(
            bundleId: "<b>", token: "\"'&", group: "g", environment: "production", state: .invalid, changedAt: 0,
            registeredAt: nil, invalidReason: "Unregistered", invalidAt: 1_000)
        let page = RegistryPage(
            summary: RegistrySummary(
                devices: [BundleDeviceCount(bundleId: "com.example.app", active: 7, invalid: 2)], since: since,
                counts: [row(1, "delivered", 3, bundle: "<script>"), row(2, "dead", 1)]),
            group: "<img src=x>", devices: [device], error: nil)
        let html = page.render()
        #expect(!html.contains("<script>") && !html.contains("<img") && !html.contains("<b>"))
        #expect(html.contains("&lt;script&gt;") && html.contains("&lt;img src=x&gt;"))
        #expect(html.contains("<code>&quot;&#39;&amp;</code>") || html.contains("<code>&quot;&#x27;&amp;</code>") || html.contains("<code>&quot;'&amp;</code>"))
        #expect(html.components(separatedBy: "<svg").count - 1 == 2)
        #expect(html.contains("<title>") && html.contains("delivered: 3</title>") && html.contains("dead: 1</title>"))
        #expect(html.contains("<td>com.example.app</td><td>7</td><td>2</td>"))
        #expect(html.contains("Unregistered at 1970-01-01 00:00:01"))
    }

    @Test func theSyncWindowTableShowsSentNowMergedAndTrailingPerBundle() {
        let counts = [
            row(0, "fannedOut", 3), row(1, "fannedOut", 2), row(1, "coalesced", 7), row(2, "trailing", 4), row(2, "delivered", 9),
            row(0, "delivered", 1, bundle: "com.example.quiet"),
        ]
        #expect(RegistryPage.syncWindowRows(counts) == [["bundleID": "com.example.app", "sentNow": "5", "merged": "7", "trailing": "4"]])
        let html = RegistryPage(summary: RegistrySummary(devices: [], since: since, counts: counts), group: nil, devices: [], error: nil).render()
        #expect(html.contains("<tr><td>com.example.app</td><td>5</td><td>7</td><td>4</td></tr>"))
    }

    @Test func withoutCountsThePageSaysSo() {
        let page = RegistryPage(summary: RegistrySummary(devices: [], since: since, counts: []), group: nil, devices: [], error: "the registry (PostgreSQL) is unavailable")
        let html = page.render()
        #expect(html.contains("No counts yet.") && html.contains("the registry (PostgreSQL) is unavailable"))
        #expect(!html.contains("<svg") && !html.contains("group-devices"))
    }
}
