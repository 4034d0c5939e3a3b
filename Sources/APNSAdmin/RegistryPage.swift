/// The registry's admin page (`GET /registry`): a group lookup, devices per bundle (active,
/// invalid) and, per bundle, the last 48 UTC hours of counts as a stacked bar chart, each for the
/// busiest bundle IDs only with a line saying what the rest hold, drawn on the
/// server as inline SVG so the page needs no script and no internet. Rendered through Mustache's
/// escaping `{{ }}` like the status page (`Templates`): group names, tokens and reasons come from
/// outside.
import APNSModel
import APNSRegistry
import Foundation
import Mustache

struct RegistryPage {
    let summary: RegistrySummary
    let group: String?
    let devices: [DeviceRecord]
    let error: String?

    func render() -> String {
        Self.template.render(context)
    }

    var context: [String: Any] {
        var context: [String: Any] = [
            "groupQuery": group ?? "",
            "bundles": summary.devices.map { ["bundleID": $0.bundleId, "active": String($0.active), "invalid": String($0.invalid)] },
            "syncWindows": Self.syncWindowRows(summary.counts),
            "legend": JobEnd.registryEnds.map { ["end": $0.contractName ?? "", "color": HourlyChart.color(of: $0)] },
            "charts": Set(summary.counts.map(\.bundleId)).sorted().map { bundle in
                ["bundleID": bundle, "chart": HourlyChart(rows: summary.counts.filter { $0.bundleId == bundle }, since: summary.since).context]
            },
        ]
        if let error { context["error"] = error }
        let devicesNotShown = summary.devicesNotShown
        if devicesNotShown.bundles > 0 {
            context["devicesNotShown"] = [
                "shown": String(summary.devices.count), "bundles": String(devicesNotShown.bundles),
                "active": String(devicesNotShown.active), "invalid": String(devicesNotShown.invalid),
            ]
        }
        if summary.countsNotShown.bundles > 0 {
            context["countsNotShown"] = [
                "shown": String(Set(summary.counts.map(\.bundleId)).count), "bundles": String(summary.countsNotShown.bundles),
                "count": String(summary.countsNotShown.count),
            ]
        }
        if let group {
            context["group"] = [
                "name": group,
                "count": devices.count,
                "devices": devices.map { device in
                    [
                        "bundleID": device.bundleId, "token": device.token, "state": device.state.rawValue,
                        "environment": device.environment, "changedAt": Self.time(ms: device.changedAt),
                        "invalid": device.invalidReason.map { "\($0) at \(Self.time(ms: device.invalidAt ?? 0))" } ?? "",
                    ]
                },
            ] as [String: Any]
        }
        return context
    }

    /// Per bundle, over the hours shown: group-job pushes sent at once, merged into a trailing
    /// push (contract §6's `coalesced`), and trailing pushes sent. Bundles with none are left out.
    static func syncWindowRows(_ counts: [CountRow]) -> [[String: String]] {
        var perBundle: [String: [JobEnd: Int64]] = [:]
        for row in counts {
            guard let end = JobEnd(contractName: row.end), JobEnd.groupEnds.contains(end) else { continue }
            perBundle[row.bundleId, default: [:]][end, default: 0] += row.count
        }
        return perBundle.keys.sorted().map { bundle in
            let counts = perBundle[bundle] ?? [:]
            return [
                "bundleID": bundle, "sentNow": String(counts[.fannedOut] ?? 0), "merged": String(counts[.coalesced] ?? 0),
                "trailing": String(counts[.trailing] ?? 0),
            ]
        }
    }

    /// `2026-11-27 08:57:25` (UTC, whole seconds rounded down): `RFC3339`'s form with a space
    /// for the `T` and no `Z`, as the page showed it through `ISO8601DateFormatter` (ICU's).
    static func time(ms: Int64) -> String {
        let text = RFC3339.string(from: Date(timeIntervalSince1970: TimeInterval(ms) / 1000))
        return String(text.prefix(10)) + " " + String(text.dropFirst(11).prefix(8))
    }

    static let template: MustacheTemplate = {
        // The template is a constant of this file: a parse error is a programming error.
        try! MustacheTemplate(string: """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8"><title>apns-worker registry</title>
            <style>
              body { font-family: sans-serif; margin: 16px; color: #222; background: #fff; }
              table { border-collapse: collapse; margin-bottom: 24px; }
              th, td { border: 1px solid #bbb; padding: 4px 8px; text-align: left; }
              .legend span { display: inline-block; margin-right: 1em; }
              .swatch { display: inline-block; width: .8em; height: .8em; margin-right: .3em; }
              .notice { padding: 6px; background: #fff3cd; }
            </style></head>
            <body>
            <p><a href="/">← status</a></p>
            <h1>Device registry</h1>
            {{#error}}<p class="notice" id="registry-error">{{error}}</p>{{/error}}
            <form method="get" action="/registry"><label>Group <input name="group" value="{{groupQuery}}"></label> <button>Look up</button></form>
            {{#group}}
            <h2>Group {{name}}: {{count}} device(s)</h2>
            <table id="group-devices"><tr><th>bundle ID</th><th>token</th><th>state</th><th>environment</th><th>changed at</th><th>invalid</th></tr>
            {{#devices}}<tr><td>{{bundleID}}</td><td><code>{{token}}</code></td><td>{{state}}</td><td>{{environment}}</td><td>{{changedAt}}</td><td>{{invalid}}</td></tr>
            {{/devices}}</table>
            {{/group}}
            <h2>Devices per bundle</h2>
            <table id="device-counts"><tr><th>bundle ID</th><th>active</th><th>invalid</th></tr>
            {{#bundles}}<tr><td>{{bundleID}}</td><td>{{active}}</td><td>{{invalid}}</td></tr>
            {{/bundles}}</table>
            {{#devicesNotShown}}<p id="device-counts-not-shown">The {{shown}} bundle IDs with the most devices are shown; {{bundles}} more hold {{active}} active and {{invalid}} invalid devices.</p>{{/devicesNotShown}}
            <h2>Group-job pushes per bundle, last 48 hours (sync window)</h2>
            <table id="sync-window-counts"><tr><th>bundle ID</th><th>sent now</th><th>merged</th><th>trailing</th></tr>
            {{#syncWindows}}<tr><td>{{bundleID}}</td><td>{{sentNow}}</td><td>{{merged}}</td><td>{{trailing}}</td></tr>
            {{/syncWindows}}</table>
            <h2>Last 48 hours (UTC), every instance</h2>
            <p class="legend">{{#legend}}<span><i class="swatch" style="background:{{color}}"></i>{{end}}</span>{{/legend}}</p>
            {{#charts}}
            <h3>{{bundleID}}</h3>
            {{#chart}}<svg xmlns="http://www.w3.org/2000/svg" width="{{width}}" height="{{height}}" role="img" aria-label="{{bundleID}}: notifications per hour by end">
            <text x="0" y="{{peakY}}" font-size="11">{{peak}}</text><text x="0" y="{{baseY}}" font-size="11">0</text>
            <line x1="{{left}}" y1="{{baseY}}" x2="{{width}}" y2="{{baseY}}" stroke="#999"/>
            {{#segments}}<rect x="{{x}}" y="{{y}}" width="{{width}}" height="{{height}}" fill="{{color}}"><title>{{hour}} {{end}}: {{count}}</title></rect>{{/segments}}
            {{#ticks}}<text x="{{x}}" y="{{y}}" font-size="10">{{label}}</text>{{/ticks}}
            </svg>{{/chart}}
            {{/charts}}
            {{^charts}}<p>No counts yet.</p>{{/charts}}
            {{#countsNotShown}}<p id="counts-not-shown">The {{shown}} bundle IDs with the most notifications are drawn; {{bundles}} more counted {{count}}.</p>{{/countsNotShown}}
            </body></html>
            """)
    }()
}

/// One bundle's last 48 UTC hours as stacked bars, one bar per hour, scaled to the busiest hour,
/// as numbers for the template. Pure, so its geometry is tested without a page.
struct HourlyChart {
    struct Segment: Equatable {
        var hourIndex: Int
        var end: JobEnd
        var count: Int64
        var y: Double
        var height: Double
    }

    static let width = 960, height = 180, top = 10, bottom = 20, left = 50, hours = 48

    let since: Int64
    let peak: Int64
    let segments: [Segment]

    init(rows: [CountRow], since: Int64) {
        self.since = since
        var perHour = [[JobEnd: Int64]](repeating: [:], count: Self.hours)
        for row in rows {
            let index = Int((row.hour - since) / 3600)
            guard row.hour >= since, index < Self.hours, let end = JobEnd(contractName: row.end) else { continue }
            perHour[index][end, default: 0] += row.count
        }
        let peak = max(perHour.map { $0.values.reduce(0, +) }.max() ?? 0, 1)
        let plot = Double(Self.height - Self.top - Self.bottom)
        var segments: [Segment] = []
        for (index, counts) in perHour.enumerated() {
            var y = Double(Self.height - Self.bottom)
            for end in JobEnd.registryEnds {
                guard let count = counts[end], count > 0 else { continue }
                let height = plot * Double(count) / Double(peak)
                y -= height
                segments.append(Segment(hourIndex: index, end: end, count: count, y: y, height: height))
            }
        }
        self.peak = peak
        self.segments = segments
    }

    static func color(of end: JobEnd) -> String {
        switch end {
        case .delivered: "#2e7d32"
        case .invalidToken: "#ef6c00"
        case .retry: "#f9a825"
        case .dead: "#c62828"
        case .gated, .held: "#757575"
        case .fannedOut: "#1565c0"
        case .coalesced: "#8e99a8"
        case .trailing: "#6a1b9a"
        }
    }

    var context: [String: Any] {
        let slot = (Self.width - Self.left) / Self.hours
        let hourLabel = { (index: Int) in
            RegistryPage.time(ms: (since + Int64(index) * 3600) * 1000).split(separator: " ").last.map { String($0.prefix(5)) } ?? ""
        }
        return [
            "width": Self.width, "height": Self.height, "left": Self.left,
            "peak": String(peak), "peakY": Self.top + 10, "baseY": Self.height - Self.bottom,
            "segments": segments.map { segment in
                [
                    "x": Self.left + segment.hourIndex * slot + 1, "width": slot - 2,
                    "y": String(format: "%.1f", segment.y), "height": String(format: "%.1f", segment.height),
                    "color": Self.color(of: segment.end), "end": segment.end.contractName ?? "", "count": String(segment.count),
                    "hour": hourLabel(segment.hourIndex),
                ] as [String: Any]
            },
            "ticks": stride(from: 0, to: Self.hours, by: 6).map { index in
                ["x": Self.left + index * slot, "y": Self.height - 5, "label": hourLabel(index)] as [String: Any]
            },
        ]
    }
}
