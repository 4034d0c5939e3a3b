import APNSModel
import Foundation

/// What the admin page draws of the fleet's bundles: this instance's own, then the busiest of
/// the rest, at most `limit` of those, with the fleet's sums of the drawn ones only. A forged
/// view holds thousands of bundles (about 14,000 of 255-byte IDs fit in its bytes); a row each
/// took the worker past its memory limit, so the page's rows, and what it sums for
/// them, no longer grow with the view. The held bundles are found in every bundle (held is
/// loud), and listed by their first names with a count. Pure: time is a `Date`.
public struct FleetBundleSummary: Sendable, Hashable {
    /// The bundles drawn, in order: `own` first (as given), then the rest by jobs in the last
    /// minute, then by jobs since their instances started, then by bundle ID.
    public var shown: [String]
    /// Distinct bundles of the live fleet not drawn.
    public var notShown: Int
    /// The fleet's sums of the drawn bundles (`FleetView.totals`).
    public var totals: [String: FleetInstance.Bundle]
    /// Bundles any live instance holds, the first `listLimit` by ID.
    public var held: [String]
    /// How many bundles any live instance holds.
    public var heldCount: Int

    /// Bundles the page draws beside its own.
    public static let defaultLimit = 50
    /// Bundle IDs a banner or a cell names before "and N more".
    public static let listLimit = 10

    /// `held`: the bundles this instance holds (its heartbeat may not have been heard yet).
    public init(
        view: FleetView, own: [String], held ownHeld: [String] = [], now: Date, limit: Int = defaultLimit, listLimit: Int = listLimit
    ) {
        // One entry per distinct bundle (a reference to its ID's storage and a count), not a copy
        // of its counts: bounded by the view's own bytes, and far smaller.
        var lifetime: [String: Int] = [:]
        var held = Set(ownHeld)
        for instance in view.live(now: now) {
            for (bundleID, bundle) in instance.bundles {
                let jobs = [bundle.delivered, bundle.invalidToken, bundle.retry, bundle.dead].reduce(0) { $0.saturatingAdd($1) }
                lifetime[bundleID] = lifetime[bundleID, default: 0].saturatingAdd(jobs)
                if bundle.held { held.insert(bundleID) }
            }
        }
        let ownSet = Set(own)
        let recent = view.rates.recentJobsByBundle(now: now)
        let others = Self.busiest(lifetime.keys.filter { !ownSet.contains($0) }, limit: max(limit, 0)) { bundleID in
            (recent[bundleID, default: 0], lifetime[bundleID, default: 0])
        }
        shown = own + others
        notShown = lifetime.keys.count(where: { !ownSet.contains($0) }) - others.count
        totals = view.totals(now: now, only: Set(shown))
        self.held = Array(held.sorted().prefix(max(listLimit, 0)))
        heldCount = held.count
    }

    /// The first `limit` of `bundleIDs` by `activity` (higher first, compared in order), then by
    /// ID: a selection that keeps `limit` entries, not a sort of them all.
    static func busiest(_ bundleIDs: some Sequence<String>, limit: Int, activity: (String) -> (Int, Int)) -> [String] {
        guard limit > 0 else { return [] }
        // Kept in order, busiest first; a candidate goes in only if it beats the last kept.
        var kept: [(id: String, recent: Int, total: Int)] = []
        func before(_ a: (id: String, recent: Int, total: Int), _ b: (id: String, recent: Int, total: Int)) -> Bool {
            (b.recent, b.total, a.id) < (a.recent, a.total, b.id)
        }
        for bundleID in bundleIDs {
            let (recent, total) = activity(bundleID)
            let candidate = (id: bundleID, recent: recent, total: total)
            if kept.count == limit {
                guard let last = kept.last, before(candidate, last) else { continue }
                kept.removeLast()
            }
            let at = kept.firstIndex { before(candidate, $0) } ?? kept.count
            kept.insert(candidate, at: at)
        }
        return kept.map(\.id)
    }

    /// `a, b, c` or `a, b, c and 12 more`: a list the page prints whole however many a forged
    /// heartbeat claims.
    public static func named(_ names: some Collection<String>, count: Int? = nil, limit: Int = listLimit) -> String {
        let total = count ?? names.count
        let shown = names.prefix(max(limit, 0))
        let text = shown.joined(separator: ", ")
        let more = total - shown.count
        guard more > 0 else { return text }
        return text.isEmpty ? "\(more) more" : "\(text) and \(more) more"
    }
}
