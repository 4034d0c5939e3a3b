/// The live graph of the admin page: fleet-wide jobs per second by end over the last 15
/// minutes, as server-drawn SVG (no script, no CDN: it works with no internet). Each end has
/// its own colour AND its own dash pattern and marker letter, with a legend and a label at the
/// end of each line, so it reads without colour. The geometry is pure and tested on its own.
import APNSFleet
import APNSModel
import Foundation
import Mustache

struct FleetGraph {
    let points: [FleetRates.Point]
    var width = 900.0
    var height = 260.0
    /// Room for the y-axis labels on the left, the line labels on the right, and the x labels.
    var left = 56.0
    var right = 150.0
    var top = 12.0
    var bottom = 28.0

    struct Style {
        var end: JobEnd
        var label: String
        var color: String
        /// SVG `stroke-dasharray`; empty = solid.
        var dash: String
    }

    static let styles: [Style] = [
        Style(end: .delivered, label: "delivered", color: "rgb(0, 120, 60)", dash: ""),
        Style(end: .invalidToken, label: "invalid token", color: "rgb(120, 80, 0)", dash: "2 3"),
        Style(end: .retry, label: "retry", color: "rgb(0, 70, 170)", dash: "8 4"),
        Style(end: .dead, label: "dead", color: "rgb(190, 0, 0)", dash: "12 3 2 3"),
    ]

    var plotWidth: Double { width - left - right }
    var plotHeight: Double { height - top - bottom }

    /// The y axis's top (`FleetGraphScale.top`: at least 1 job/s, at most 10^16, whatever the points hold).
    var yMax: Double { FleetGraphScale.top(points) }

    static func bounded(_ rate: Double) -> Double { FleetGraphScale.bounded(rate) }
    static func niceCeiling(_ value: Double) -> Double { FleetGraphScale.niceCeiling(value) }

    func x(_ index: Int) -> Double {
        guard points.count > 1 else { return left }
        return left + plotWidth * Double(index) / Double(points.count - 1)
    }

    func y(_ rate: Double) -> Double { top + plotHeight * (1 - min(Self.bounded(rate), yMax) / yMax) }

    /// SVG `points` of one end's polyline.
    func polyline(_ end: JobEnd) -> String {
        points.enumerated().map { index, point in
            "\(Self.format(x(index))),\(Self.format(y(point.perSecond[end] ?? 0)))"
        }.joined(separator: " ")
    }

    /// Horizontal grid lines with their labels, at round steps (`FleetGraphScale.ticks`).
    var yTicks: [(y: Double, label: String)] {
        FleetGraphScale.ticks(top: yMax).map { (y($0), Self.rateLabel($0)) }
    }

    /// Minutes before now along the bottom: -15, -10, -5 and now.
    var xTicks: [(x: Double, label: String)] {
        guard points.count > 1 else { return [] }
        let span = points.count - 1
        return [(0, "-15 min"), (span / 3, "-10 min"), (2 * span / 3, "-5 min"), (span, "now")].map { (x($0.0), $0.1) }
    }

    /// The labels at the right end of the lines: as close to their line as they can be while
    /// 13 px apart (one line of text) and inside the drawing, so none overlaps or is cut off.
    func labelPositions(_ wanted: [Double]) -> [Double] {
        let spacing = 13.0
        let order = wanted.indices.sorted { (wanted[$0], $0) < (wanted[$1], $1) }
        var placed = wanted
        var previous = -Double.infinity
        for index in order {
            placed[index] = max(wanted[index], previous + spacing)
            previous = placed[index]
        }
        // Pushed past the bottom: move the lowest ones up, keeping the spacing.
        var next = height - 2 + spacing
        for index in order.reversed() {
            placed[index] = min(placed[index], next - spacing)
            next = placed[index]
        }
        return placed
    }

    static func rateLabel(_ value: Double) -> String { FleetGraphScale.label(value) }

    static func format(_ value: Double) -> String { String(format: "%.1f", value) }

    var context: [String: Any] {
        let latest = points.last?.perSecond ?? [:]
        let labelYs = labelPositions(Self.styles.map { y(latest[$0.end] ?? 0) + 4 })
        let series: [[String: Any]] = zip(Self.styles, labelYs).map { style, labelY in
            [
                "label": style.label, "color": style.color, "dash": style.dash, "points": polyline(style.end),
                "labelX": Self.format(left + plotWidth + 6), "labelY": Self.format(labelY),
                "now": Self.rateLabel(latest[style.end] ?? 0),
            ]
        }
        return [
            "width": Self.format(width), "height": Self.format(height),
            "plotX": Self.format(left), "plotY": Self.format(top),
            "plotWidth": Self.format(plotWidth), "plotHeight": Self.format(plotHeight),
            "plotRight": Self.format(left + plotWidth),
            "series": series,
            "yTicks": yTicks.map { ["y": Self.format($0.y), "labelY": Self.format($0.y + 4), "label": $0.label] },
            "xTicks": xTicks.map { ["x": Self.format($0.x), "label": $0.label] },
            "xLabelY": Self.format(height - 8),
        ]
    }

    func svg() -> String { Self.template.render(context) }

    /// The whole document the page's frame shows: the legend and the SVG, reloaded by the
    /// browser every `refresh` seconds (a meta refresh, so no script is needed).
    func document(refresh: Int) -> String {
        var context = self.context
        context["refresh"] = refresh
        context["legend"] = Self.styles.map { ["label": $0.label, "color": $0.color, "dash": $0.dash] }
        return Self.documentTemplate.render(context)
    }

    static let svgSource = """
        <svg xmlns="http://www.w3.org/2000/svg" id="fleet-graph" width="{{width}}" height="{{height}}" viewBox="0 0 {{width}} {{height}}" role="img" aria-label="Jobs per second by end, whole fleet, last 15 minutes">
        <rect x="{{plotX}}" y="{{plotY}}" width="{{plotWidth}}" height="{{plotHeight}}" fill="rgb(235, 242, 250)" stroke="#999"/>
        {{#yTicks}}<line x1="{{plotX}}" x2="{{plotRight}}" y1="{{y}}" y2="{{y}}" stroke="#ccc"/><text x="4" y="{{labelY}}" font-size="11" font-family="sans-serif">{{label}}</text>
        {{/yTicks}}{{#xTicks}}<text x="{{x}}" y="{{xLabelY}}" font-size="11" font-family="sans-serif" text-anchor="middle">{{label}}</text>
        {{/xTicks}}{{#series}}<polyline class="series" data-end="{{label}}" fill="none" stroke="{{color}}" stroke-width="2" stroke-dasharray="{{dash}}" points="{{points}}"><title>{{label}}</title></polyline>
        <text x="{{labelX}}" y="{{labelY}}" font-size="12" font-family="sans-serif" fill="{{color}}">{{label}} {{now}}</text>
        {{/series}}</svg>
        """

    // Constants of this file: a parse error is a programming error. Every value goes in through
    // the escaping {{ }}, as in `Templates`.
    static let template: MustacheTemplate = { try! MustacheTemplate(string: svgSource) }()

    static let documentTemplate: MustacheTemplate = {
        try! MustacheTemplate(string: """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{{refresh}}">
            <title>jobs per second</title><style>body { margin: 0; font-family: sans-serif; background: #fff; }
            .legend span { margin-right: 18px; font-size: 13px; } .legend svg { vertical-align: middle; }</style></head>
            <body><div class="legend">{{#legend}}<span><svg width="36" height="10"><line x1="0" x2="36" y1="5" y2="5" stroke="{{color}}" stroke-width="2" stroke-dasharray="{{dash}}"/></svg> {{label}}</span>{{/legend}}</div>
            """ + svgSource + """

            </body></html>
            """)
    }()
}
