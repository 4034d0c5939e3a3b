/// The registry's admin page (`GET /registry`): a group lookup, devices per bundle (active,
/// invalid) and, per bundle, the last 48 UTC hours of counts as a stacked bar chart drawn on the
/// server as inline SVG (no script, no CDN). Every string from the registry is HTML-escaped.
import APNSCore
import APNSRegistry
import Foundation

struct RegistryPage {
    let summary: RegistrySummary
    let group: String?
    let devices: [DeviceRecord]
    let error: String?

    static let colors: [JobEndKind: String] = [
        .delivered: "#2e7d32", .invalidToken: "#ef6c00", .retry: "#f9a825", .dead: "#c62828", .gated: "#757575", .fannedOut: "#1565c0",
    ]

    func render() -> String {
        var html = """
            <!doctype html><html><head><meta charset="utf-8"><title>apns-worker registry</title>
            <style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
            .legend span{display:inline-block;margin-right:1em}.swatch{display:inline-block;width:.8em;height:.8em;margin-right:.3em}</style>
            </head><body><p><a href="/">← status</a></p><h1>Device registry</h1>
            <form method="get" action="/registry"><label>Group <input name="group" value="\(Self.escape(group ?? ""))"></label> <button>Look up</button></form>

            """
        if let error { html += "<p><strong>\(Self.escape(error))</strong></p>\n" }
        if let group {
            html += "<h2>Group \(Self.escape(group)): \(devices.count) device(s)</h2>\n"
            html += "<table><tr><th>bundle ID</th><th>token</th><th>state</th><th>environment</th><th>changed at</th><th>invalid</th></tr>\n"
            for device in devices {
                let invalid = device.invalidReason.map { "\($0) at \(Self.time(ms: device.invalidAt))" } ?? ""
                html += "<tr><td>\(Self.escape(device.bundleId))</td><td><code>\(Self.escape(device.token))</code></td><td>\(device.state.rawValue)</td>"
                html += "<td>\(Self.escape(device.environment))</td><td>\(Self.time(ms: device.changedAt))</td><td>\(Self.escape(invalid))</td></tr>\n"
            }
            html += "</table>\n"
        }
        html += "<h2>Devices per bundle</h2>\n<table><tr><th>bundle ID</th><th>active</th><th>invalid</th></tr>\n"
        for row in summary.devices {
            html += "<tr><td>\(Self.escape(row.bundleId))</td><td>\(row.active)</td><td>\(row.invalid)</td></tr>\n"
        }
        html += "</table>\n<h2>Last 48 hours (UTC), every instance</h2>\n<p class=\"legend\">"
        for end in JobEndKind.allCases {
            html += "<span><i class=\"swatch\" style=\"background:\(Self.colors[end]!)\"></i>\(end.rawValue)</span>"
        }
        html += "</p>\n"
        let bundles = Set(summary.counts.map(\.bundleId)).sorted()
        if bundles.isEmpty { html += "<p>No counts yet.</p>\n" }
        for bundle in bundles {
            html += "<h3>\(Self.escape(bundle))</h3>\n" + Self.chart(summary.counts.filter { $0.bundleId == bundle }, since: summary.since) + "\n"
        }
        return html + "</body></html>\n"
    }

    /// 48 hourly bars, each stacked by end, scaled to the busiest hour.
    static func chart(_ rows: [CountRow], since: Int64, hours: Int = 48) -> String {
        let width = 960, height = 180, top = 10, bottom = 20, left = 50
        let slot = (width - left) / hours
        var perHour = [[JobEndKind: Int64]](repeating: [:], count: hours)
        for row in rows {
            let index = Int((row.hour - since) / 3600)
            guard (0..<hours).contains(index), let end = JobEndKind(rawValue: row.end) else { continue }
            perHour[index][end, default: 0] += row.count
        }
        let peak = max(perHour.map { $0.values.reduce(0, +) }.max() ?? 0, 1)
        let plot = Double(height - top - bottom)
        var svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(width)\" height=\"\(height)\" role=\"img\" aria-label=\"notifications per hour\">"
        svg += "<text x=\"0\" y=\"\(top + 10)\" font-size=\"11\">\(peak)</text><text x=\"0\" y=\"\(height - bottom)\" font-size=\"11\">0</text>"
        svg += "<line x1=\"\(left)\" y1=\"\(height - bottom)\" x2=\"\(width)\" y2=\"\(height - bottom)\" stroke=\"#999\"/>"
        for (index, counts) in perHour.enumerated() {
            let x = left + index * slot
            var y = Double(height - bottom)
            for end in JobEndKind.allCases {
                guard let count = counts[end], count > 0 else { continue }
                let h = plot * Double(count) / Double(peak)
                y -= h
                svg += "<rect x=\"\(x + 1)\" y=\(String(format: "\"%.1f\"", y)) width=\"\(slot - 2)\" height=\(String(format: "\"%.1f\"", h)) fill=\"\(colors[end]!)\"><title>\(end.rawValue): \(count)</title></rect>"
            }
            if index % 6 == 0 {
                let label = time(ms: (since + Int64(index) * 3600) * 1000).split(separator: " ").last?.prefix(5) ?? ""
                svg += "<text x=\"\(x)\" y=\"\(height - 5)\" font-size=\"10\">\(escape(String(label)))</text>"
            }
        }
        return svg + "</svg>"
    }

    static func time(ms: Int64?) -> String {
        guard let ms else { return "" }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate, .withTime, .withColonSeparatorInTime]
        return formatter.string(from: Date(timeIntervalSince1970: TimeInterval(ms) / 1000)).replacingOccurrences(of: "T", with: " ")
    }

    static func escape(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
    }
}
