/// The value forms of the configuration file: durations, lists, booleans, bounded integers and
/// `host:port`. Each parser returns nil or a reason; the caller adds file, line and key.

import Foundation

/// A value parse failure: what to tell the operator after `file:line: [section] key: `.
struct ValueProblem: Error, Sendable {
    var message: String
    init(_ message: String) { self.message = message }
}

enum ValueSyntax {
    static let durationHint = "use e.g. 10s, 1m, 500ms, 1h30m"

    /// `10s`, `1m`, `5m`, `1h30m`, `250ms`, `1.5s`, `0`; units `h`, `m`, `s`, `ms`.
    static func duration(_ text: String) throws(ValueProblem) -> Duration {
        let problem = ValueProblem("\(quoted(text)) is not a duration (\(durationHint))")
        let chars = Array(text)
        if text == "0" { return .zero }
        guard !chars.isEmpty else { throw problem }
        var index = 0
        var totalNanoseconds: Int64 = 0
        while index < chars.count {
            var whole = ""
            var fraction = ""
            while index < chars.count, chars[index].isASCII, chars[index].isNumber { whole.append(chars[index]); index += 1 }
            if index < chars.count, chars[index] == "." {
                index += 1
                while index < chars.count, chars[index].isASCII, chars[index].isNumber {
                    fraction.append(chars[index]); index += 1
                }
                guard !fraction.isEmpty else { throw problem }
            }
            guard !whole.isEmpty || !fraction.isEmpty else { throw problem }
            var unit = ""
            while index < chars.count, chars[index].isASCII, chars[index].isLetter { unit.append(chars[index]); index += 1 }
            let unitNanoseconds: Int64
            switch unit {
            case "ms": unitNanoseconds = 1_000_000
            case "s": unitNanoseconds = 1_000_000_000
            case "m": unitNanoseconds = 60_000_000_000
            case "h": unitNanoseconds = 3_600_000_000_000
            default: throw problem
            }
            // Whole part and fraction separately, in integers: 1.5s is exact, not 1.4999….
            guard let wholeValue = Int64(whole.isEmpty ? "0" : whole) else { throw problem }
            let (scaled, overflow) = wholeValue.multipliedReportingOverflow(by: unitNanoseconds)
            guard !overflow else { throw ValueProblem("\(quoted(text)) is too long a duration") }
            var fractionNanoseconds: Int64 = 0
            var scale = unitNanoseconds
            for digit in fraction.prefix(12) {
                scale /= 10
                fractionNanoseconds += Int64(digit.wholeNumberValue!) * scale
            }
            let (sum, sumOverflow) = totalNanoseconds.addingReportingOverflow(scaled + fractionNanoseconds)
            guard !sumOverflow else { throw ValueProblem("\(quoted(text)) is too long a duration") }
            totalNanoseconds = sum
        }
        return .nanoseconds(totalNanoseconds)
    }

    /// gcfg's booleans: true/yes/on/1 and false/no/off/0, any case.
    static func bool(_ text: String) throws(ValueProblem) -> Bool {
        switch text.lowercased() {
        case "true", "yes", "on", "1": return true
        case "false", "no", "off", "0": return false
        default: throw ValueProblem("\(quoted(text)) is not a boolean (use true or false)")
        }
    }

    static func int(_ text: String, in range: ClosedRange<Int>) throws(ValueProblem) -> Int {
        guard let value = Int(text) else { throw ValueProblem("\(quoted(text)) is not a whole number") }
        guard range.contains(value) else {
            throw ValueProblem("\(value) is out of range (\(range.lowerBound) to \(range.upperBound))")
        }
        return value
    }

    /// Comma-separated, each item trimmed; empty items are errors (a stray comma is a typo).
    static func list(_ text: String) throws(ValueProblem) -> [String] {
        let items = text.split(separator: ",", omittingEmptySubsequences: false).map {
            $0.trimmingWhitespace()
        }
        if items.count == 1, items[0].isEmpty { return [] }
        guard !items.contains(where: \.isEmpty) else {
            throw ValueProblem("\(quoted(text)) has an empty item (items are separated by single commas)")
        }
        return items
    }

    /// `host:port`, `[v6]:port`.
    static func hostPort(_ text: String, portRange: ClosedRange<Int>) throws(ValueProblem) -> (host: String, port: Int) {
        let problem = ValueProblem("\(quoted(text)) is not host:port (e.g. 127.0.0.1:8080 or [::1]:8080)")
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw problem }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { throw problem }
            portText = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else { throw problem }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard !host.isEmpty, !host.contains(where: \.isWhitespace), let port = Int(portText) else { throw problem }
        guard portRange.contains(port) else {
            throw ValueProblem("port \(port) is out of range (\(portRange.lowerBound) to \(portRange.upperBound))")
        }
        return (String(host), port)
    }

    /// A value in an error: quoted, with control characters visible.
    static func quoted(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }
}

extension Substring {
    func trimmingWhitespace() -> String {
        String(drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
    }
}

extension String {
    func trimmingWhitespace() -> String { self[...].trimmingWhitespace() }
}

/// Durations written as in the configuration file (`10s`, `1m30s`, `500ms`), for command-line
/// options that should read the same way.
public enum DurationText {
    /// The duration, or nil with `hint` describing the accepted forms.
    public static func parse(_ text: String) -> Duration? {
        try? ValueSyntax.duration(text)
    }

    public static let hint = ValueSyntax.durationHint
}
