/// A strict reader of the Prometheus text exposition format (0.0.4) for the tests: every line
/// must be a comment, a `# TYPE`/`# HELP` line or a well-formed sample, or parsing fails.
import APNSWorker
import Foundation
import TestSupport

struct PrometheusText {
    struct Sample {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    var samples: [Sample] = []
    /// `# TYPE` of each family.
    var types: [String: String] = [:]

    func value(_ name: String, _ labels: [String: String]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    static let metricName = try! NSRegularExpression(pattern: "^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    static let labelName = try! NSRegularExpression(pattern: "^[a-zA-Z_][a-zA-Z0-9_]*$")

    static func matches(_ regex: NSRegularExpression, _ text: String) -> Bool {
        regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
    }

    static func parse(_ text: String) throws -> PrometheusText {
        var result = PrometheusText()
        for line in text.split(separator: "\n").map(String.init) {
            if line.hasPrefix("#") {
                let parts = line.split(separator: " ", maxSplits: 3).map(String.init)
                if parts.count >= 4, parts[1] == "TYPE" {
                    guard matches(metricName, parts[2]),
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(parts[3])
                    else { throw TestSupportError("bad TYPE line: \(line)") }
                    result.types[parts[2]] = parts[3]
                }
                continue
            }
            result.samples.append(try sample(line))
        }
        return result
    }

    static func sample(_ line: String) throws -> Sample {
        guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...].replacingOccurrences(of: "+Inf", with: "inf"))
        else { throw TestSupportError("no value: \(line)") }
        let series = String(line[..<space])
        var name = series
        var labels: [String: String] = [:]
        if let open = series.firstIndex(of: "{") {
            guard series.hasSuffix("}") else { throw TestSupportError("unclosed labels: \(line)") }
            name = String(series[..<open])
            var rest = Substring(series[series.index(after: open)..<series.index(before: series.endIndex)])
            while !rest.isEmpty {
                guard let equals = rest.firstIndex(of: "=") else { throw TestSupportError("bad label: \(line)") }
                let key = String(rest[..<equals])
                guard matches(labelName, key) else { throw TestSupportError("bad label name \(key): \(line)") }
                rest = rest[rest.index(after: equals)...]
                guard rest.first == "\"" else { throw TestSupportError("unquoted label value: \(line)") }
                rest = rest.dropFirst()
                var labelValue = ""
                var escaped = false
                while let character = rest.first {
                    rest = rest.dropFirst()
                    if escaped {
                        labelValue.append(character == "n" ? "\n" : character)
                        escaped = false
                    } else if character == "\\" {
                        escaped = true
                    } else if character == "\"" {
                        break
                    } else {
                        labelValue.append(character)
                    }
                }
                labels[key] = labelValue
                if rest.first == "," { rest = rest.dropFirst() }
            }
        }
        guard matches(metricName, name) else { throw TestSupportError("bad metric name: \(line)") }
        return Sample(name: name, labels: labels, value: value)
    }
}

/// A worker status fixed by the test, for the admin routes that only read it.
struct FixedStatus: WorkerStatusProviding {
    var fixed = WorkerStatus(broker: "connected", bundles: [])
    func status() -> WorkerStatus { fixed }
}
