// libFuzzer target: every admin query parameter (AdminQuery) on arbitrary query strings. The
// input is split as a URL query (`&`, then the first `=`, percent-decoded) into the pairs the
// admin routes hand over; every parser must answer or throw a Problem, and what it answers
// must stay within the bounds the admin relies on (a page is never unbounded).
import APNSAdminQuery
import Foundation
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzAdminQuery_main")
public func fuzzAdminQueryMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzAdminQuery(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzAdminQuery(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAdminQuery(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let pairs: [(String, String)] = text.split(separator: "&", omittingEmptySubsequences: true).map { item in
        let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        let decode = { (part: Substring) in String(part).removingPercentEncoding ?? String(part) }
        return (decode(parts[0]), parts.count > 1 ? decode(parts[1]) : "")
    }
    if let (selection, page) = try? AdminQuery.listing(pairs) {
        precondition((1...AdminQuery.maximumPageSize).contains(page.limit), "page size out of bounds")
        precondition((0...AdminQuery.maximumOffset).contains(page.offset), "offset out of bounds")
        check(selection)
    }
    if let selection = try? AdminQuery.bulkSelection(pairs, allowing: ["confirm"]) {
        check(selection)
        precondition(selection.bundleID?.isEmpty != true && selection.reason?.isEmpty != true, "an empty selection widened a bulk move")
    }
    if let (action, selection) = try? AdminQuery.bulkConfirmation(pairs) {
        precondition(action == "requeue" || action == "purge")
        check(selection)
    }
    let (view, offset) = AdminQuery.pageView(pairs)
    precondition((0...AdminQuery.maximumOffset).contains(offset))
    check(view)
    _ = AdminQuery.purgeConfirmed(pairs)
    _ = AdminQuery.nonEmpty("bundle", pairs)
    _ = AdminQuery.nonEmpty("group", pairs)
    return 0
}

private func check(_ selection: AdminQuery.Selection) {
    if let age = selection.olderThan { precondition(age >= .zero, "a negative age") }
    for value in [selection.bundleID, selection.reason].compactMap({ $0 }) {
        precondition(!value.isEmpty && value.utf8.count <= AdminQuery.maximumValueLength, "a value out of bounds")
    }
}
