@testable import APNSAdmin
@testable import APNSRegistry
import Foundation
import Testing

/// The registry page's server-drawn chart and escaping, without a server or a database.
struct RegistryPageTests {
    let since: Int64 = 1_790_000_000 / 3600 * 3600

    func row(_ hourIndex: Int64, _ end: String, _ count: Int64, bundle: String = "com.example.app") -> CountRow {
        CountRow(bundleId: bundle, hour: since + hourIndex * 3600, end: end, count: count)
    }

    @Test func barsStackByEndAndScaleToTheBusiestHour() {
        let svg = RegistryPage.chart([row(0, "delivered", 30), row(0, "dead", 10), row(47, "delivered", 40)], since: since)
        #expect(svg.components(separatedBy: "<rect").count - 1 == 3)
        #expect(svg.contains("<title>delivered: 30</title>"))
        #expect(svg.contains("<title>dead: 10</title>"))
        // The busiest hour (40 jobs) fills the plot: 180 high less 10 on top and 20 below.
        #expect(svg.contains(##"height="150.0" fill="#2e7d32"><title>delivered: 40</title>"##))
        // Hour 0 holds 30 + 10 = 40 too: its two parts stack to the same full height.
        #expect(svg.contains(#"y="47.5" width"#) && svg.contains(#"y="10.0" width"#))
        #expect(svg.contains(">40</text>"))
    }

    @Test func rowsOutsideTheWindowAndUnknownEndsAreLeftOut() {
        let svg = RegistryPage.chart([row(-1, "delivered", 5), row(48, "delivered", 5), row(3, "exploded", 5)], since: since)
        #expect(!svg.contains("<rect"))
        #expect(svg.contains(">1</text>"), "an empty chart scales to 1, never divides by zero")
    }

    @Test func everyStringFromTheRegistryIsEscaped() {
        let device = DeviceRecord(
            bundleId: "<b>", token: "\"'&", group: "g", environment: "production", state: .active, changedAt: 0, registeredAt: nil,
            invalidReason: nil, invalidAt: nil)
        let page = RegistryPage(
            summary: RegistrySummary(devices: [], since: since, counts: [row(1, "delivered", 1, bundle: "<script>")]),
            group: "<img src=x>", devices: [device], error: nil)
        let html = page.render()
        #expect(!html.contains("<script>") && !html.contains("<img") && !html.contains("<b>"))
        #expect(html.contains("&lt;script&gt;") && html.contains("&lt;img src=x&gt;") && html.contains("&quot;&#39;&amp;"))
    }
}
