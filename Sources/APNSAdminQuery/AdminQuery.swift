import APNSFleet
import APNSModel

/// Every query parameter of the admin server, parsed in one place as pure functions of the
/// (already percent-decoded) name/value pairs, so that all of them are tested and fuzzed
/// (Fuzz/Sources/FuzzAdminQuery) without a server. A listing's page is always bounded: the
/// admin runs inside the worker, and a listing holds the messages it reads.
public enum AdminQuery {
    public struct Problem: Error, Sendable, Hashable, CustomStringConvertible {
        public var message: String
        public init(_ message: String) { self.message = message }
        public var description: String { message }
    }

    /// Which jobs: `bundle`, `reason`, `olderThan` (e.g. 90s, 10m, 2h, 1d). Nil: any.
    public struct Selection: Sendable, Hashable {
        public var bundleID: String?
        public var reason: String?
        public var olderThan: Duration?

        public init(bundleID: String? = nil, reason: String? = nil, olderThan: Duration? = nil) {
            self.bundleID = bundleID
            self.reason = reason
            self.olderThan = olderThan
        }
    }

    /// `offset` (matching jobs to skip) and `limit` (the page's size).
    public struct Page: Sendable, Hashable {
        public var offset: Int
        public var limit: Int

        public init(offset: Int = 0, limit: Int = AdminQuery.defaultPageSize) {
            self.offset = offset
            self.limit = limit
        }
    }

    /// A listing's page size without `limit`, and the most `limit` may ask for.
    public static let defaultPageSize = 100
    public static let maximumPageSize = 500
    /// The furthest a page may start: a queue is read at most 65,535 messages deep (AMQP
    /// prefetch is 16 bits), so a page beyond that could never hold anything.
    public static let maximumOffset = 65_535
    /// The longest value taken for a name or reason; longer is a 400, not a queue name.
    public static let maximumValueLength = 255

    /// `GET /api/{dead|retry}`: the selection and the page. Unknown names are ignored (a
    /// listing only reads); bad values are a `Problem`.
    public static func listing(_ query: [(String, String)]) throws(Problem) -> (Selection, Page) {
        let selection = try self.selection(query)
        var page = Page()
        if let text = first("limit", query), !text.isEmpty {
            page.limit = try number("limit", text, in: 1...maximumPageSize)
        }
        if let text = first("offset", query), !text.isEmpty {
            page.offset = try number("offset", text, in: 0...maximumOffset)
        }
        return (selection, page)
    }

    /// The selection of a bulk requeue or purge. Stricter than a listing's: a name it does not
    /// know, an empty value, a repeated name or `limit` would silently widen what it moves or
    /// drops (an empty `bundle=` from a script must not mean every bundle), so each is a Problem.
    public static func bulkSelection(_ query: [(String, String)], allowing extra: Set<String> = []) throws(Problem) -> Selection {
        let known: Set<String> = ["bundle", "reason", "olderThan"]
        var seen: Set<String> = []
        for (name, value) in query {
            guard seen.insert(name).inserted else { throw Problem("\(shown(name)): given twice") }
            if extra.contains(name) { continue }
            guard known.contains(name) else {
                throw Problem("\(shown(name)): not a selection of this route (bundle, reason, olderThan)")
            }
            guard !value.isEmpty else { throw Problem("\(name): empty; leave it out to select every \(name)") }
        }
        return try selection(query)
    }

    /// The page's confirmation step of a bulk move: `action` (requeue or purge) and the selection.
    public static func bulkConfirmation(_ query: [(String, String)]) throws(Problem) -> (action: String, selection: Selection) {
        guard let action = first("action", query), action == "requeue" || action == "purge" else {
            throw Problem("action: requeue or purge")
        }
        return (action, try bulkSelection(query, allowing: ["action"]))
    }

    /// A purge drops jobs for good: only with `confirm=yes`.
    public static func purgeConfirmed(_ query: [(String, String)]) -> Bool {
        first("confirm", query) == "yes"
    }

    /// `GET /api/fleet`: `after` (an instance id; the page starts after it) and `limit`
    /// (instances, 1 to `FleetPage.maximumLimit`, default every instance a view keeps). An
    /// `after` longer than any instance id (`FleetInstance.maxIDBytes`) is a Problem.
    public static func fleetPage(_ query: [(String, String)]) throws(Problem) -> FleetPage.Request {
        var request = FleetPage.Request()
        if let text = first("limit", query), !text.isEmpty {
            request.limit = try number("limit", text, in: 1...FleetPage.maximumLimit)
        }
        if let after = first("after", query), !after.isEmpty {
            guard after.utf8.count <= FleetInstance.maxIDBytes else {
                throw Problem("after: longer than an instance id (\(FleetInstance.maxIDBytes) bytes)")
            }
            request.after = after
        }
        return request
    }

    /// The HTML page's dead-job view: `bundle`, `reason` and `offset`. Lenient (a person typed
    /// it): a bad offset shows the first page.
    public static func pageView(_ query: [(String, String)]) -> (Selection, offset: Int) {
        var selection = Selection()
        selection.bundleID = nonEmpty("bundle", query)
        selection.reason = nonEmpty("reason", query)
        let offset = first("offset", query).flatMap { try? number("offset", $0, in: 0...maximumOffset) } ?? 0
        return (selection, offset)
    }

    /// A single job's `bundle`, or a registry page's `group`: nil when absent or empty.
    public static func nonEmpty(_ name: String, _ query: [(String, String)]) -> String? {
        guard let value = first(name, query), !value.isEmpty, value.utf8.count <= maximumValueLength else { return nil }
        return value
    }

    /// A whole number and one unit: ms, s, m, h or d.
    public static func duration(_ text: String) -> Duration? {
        let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        for (unit, milliseconds) in units where text.hasSuffix(unit) {
            let number = text.dropLast(unit.count)
            // "5ms" also ends in "s": only accept the unit whose prefix is all digits.
            guard !number.isEmpty, number.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int64(number) else { continue }
            let (total, overflow) = value.multipliedReportingOverflow(by: milliseconds)
            return overflow ? nil : .milliseconds(total)
        }
        return nil
    }

    // MARK: - Parts

    static func selection(_ query: [(String, String)]) throws(Problem) -> Selection {
        var selection = Selection()
        for name in ["bundle", "reason"] {
            guard let value = first(name, query), !value.isEmpty else { continue }
            guard value.utf8.count <= maximumValueLength else { throw Problem("\(name): longer than \(maximumValueLength) bytes") }
            if name == "bundle" { selection.bundleID = value } else { selection.reason = value }
        }
        if let text = first("olderThan", query), !text.isEmpty {
            guard let age = duration(text) else {
                throw Problem("olderThan: \(quoted(text)) is not a duration (e.g. 90s, 10m, 2h, 1d)")
            }
            selection.olderThan = age
        }
        return selection
    }

    static func number(_ name: String, _ text: String, in range: ClosedRange<Int>) throws(Problem) -> Int {
        guard text.utf8.count <= 12, text.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(text) else {
            throw Problem("\(name): \(quoted(text)) is not a whole number")
        }
        guard range.contains(value) else { throw Problem("\(name): \(value) is out of range (\(range.lowerBound) to \(range.upperBound))") }
        return value
    }

    /// The first value of `name` (later repeats are ignored, as Hummingbird's `get` does).
    static func first(_ name: String, _ query: [(String, String)]) -> String? {
        query.first { $0.0 == name }?.1
    }

    /// A value quoted for an error message, cut to a readable length.
    static func quoted(_ text: String) -> String {
        let cut = text.count > 40 ? String(text.prefix(40)) + "…" : text
        return "\"\(cut)\""
    }

    static func shown(_ name: String) -> String {
        name.count > 40 ? String(name.prefix(40)) + "…" : name
    }
}
