import APNSAdminQuery
import APNSModel
import Testing

/// The admin's query parameters (every listing bounded; one pure parser,
/// fuzzed by Fuzz/Sources/FuzzAdminQuery).
struct AdminQueryTests {
    @Test func aListingIsAlwaysAPage() throws {
        let (selection, page) = try AdminQuery.listing([])
        #expect(selection == AdminQuery.Selection() && page == AdminQuery.Page(offset: 0, limit: AdminQuery.defaultPageSize))
        // A filter no longer lifts the cap (it did: any filter listed every match).
        let (filtered, filteredPage) = try AdminQuery.listing([("reason", "BadDeviceToken"), ("bundle", "com.example.app"), ("olderThan", "2h")])
        #expect(filtered == AdminQuery.Selection(bundleID: "com.example.app", reason: "BadDeviceToken", olderThan: .seconds(7200)))
        #expect(filteredPage.limit == AdminQuery.defaultPageSize)
        #expect(try AdminQuery.listing([("limit", "500"), ("offset", "65535")]).1 == AdminQuery.Page(offset: 65535, limit: 500))
        for (name, value) in [
            ("limit", "0"), ("limit", "501"), ("limit", "-1"), ("limit", "1e3"), ("limit", "99999999999999999999"),
            ("offset", "-1"), ("offset", "65536"), ("offset", "x"), ("olderThan", "soon"), ("olderThan", "-5m"),
            ("bundle", String(repeating: "b", count: 256)),
        ] {
            #expect(throws: AdminQuery.Problem.self, "\(name)=\(value)") { try AdminQuery.listing([(name, value)]) }
        }
        #expect(throws: AdminQuery.Problem("olderThan: \"soon\" is not a duration (e.g. 90s, 10m, 2h, 1d)")) {
            try AdminQuery.listing([("olderThan", "soon")])
        }
    }

    @Test func aBulkSelectionNeverWidensSilently() throws {
        #expect(try AdminQuery.bulkSelection([("bundle", "b"), ("reason", "r")]) == AdminQuery.Selection(bundleID: "b", reason: "r"))
        for query: [(String, String)] in [[("bundle", "")], [("limit", "5")], [("offset", "5")], [("bundle", "a"), ("bundle", "b")], [("x", "y")]] {
            #expect(throws: AdminQuery.Problem.self, "\(query)") { try AdminQuery.bulkSelection(query) }
        }
        #expect(try AdminQuery.bulkSelection([("confirm", "yes")], allowing: ["confirm"]) == AdminQuery.Selection())
        #expect(AdminQuery.purgeConfirmed([("confirm", "yes")]) && !AdminQuery.purgeConfirmed([("confirm", "YES")]))
        let (action, selection) = try AdminQuery.bulkConfirmation([("action", "purge"), ("bundle", "b")])
        #expect(action == "purge" && selection.bundleID == "b")
        #expect(throws: AdminQuery.Problem.self) { try AdminQuery.bulkConfirmation([("action", "drop")]) }
    }

    @Test func thePageViewIsLenient() {
        let (selection, offset) = AdminQuery.pageView([("bundle", "b"), ("reason", ""), ("offset", "200")])
        #expect(selection == AdminQuery.Selection(bundleID: "b") && offset == 200)
        #expect(AdminQuery.pageView([("offset", "-3")]).offset == 0)
        #expect(AdminQuery.pageView([("offset", "99999999")]).offset == 0)
        #expect(AdminQuery.nonEmpty("group", [("group", "")]) == nil && AdminQuery.nonEmpty("group", [("group", "g")]) == "g")
    }

    @Test func durations() {
        #expect(AdminQuery.duration("90s") == .seconds(90) && AdminQuery.duration("5ms") == .milliseconds(5))
        #expect(AdminQuery.duration("1d") == .seconds(86_400) && AdminQuery.duration("0m") == .zero)
        for bad in ["", "s", "5", "5x", "+5s", "-5s", "٥s", "9223372036854775807d"] { #expect(AdminQuery.duration(bad) == nil, "\(bad)") }
    }
}
