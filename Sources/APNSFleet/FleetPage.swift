import Foundation

/// One page of `GET /api/fleet` (contract §5: every live instance), as the JSON it answers.
///
/// The whole fleet in one answer was a JSON of every kept bundle: about 14,000 under a forged
/// view, which took the worker past its memory limit. A page holds live instances in
/// order of their ids, after `after`, at most `limit` of them and `maxBytes` of their JSON
/// (always at least one: a kept instance came in a heartbeat of at most 64 KiB), each encoded
/// on its own as it is added; `next` is the last id of a page that is not the end, to be given
/// as `after`. Every live instance is reachable by following `next`, and an honest fleet (up to
/// 1,000 instances of a few bundles) fits in the default page. Pure, for tests without a server.
public struct FleetPage: Sendable, Hashable {
    /// `?after=` (an instance id: the page starts after it) and `?limit=` (instances).
    public struct Request: Sendable, Hashable {
        public var after: String?
        public var limit: Int

        public init(after: String? = nil, limit: Int = FleetPage.defaultLimit) {
            self.after = after
            self.limit = limit
        }
    }

    /// Every instance a view keeps: the default page of an honest fleet is the whole fleet.
    public static let defaultLimit = FleetView.maxInstances
    public static let maximumLimit = FleetView.maxInstances
    /// The instances' JSON a page holds at most (it passes this only to hold one instance).
    public static let maxBytes = 2 << 20

    /// The answer: `{"dropped": {...}, "instances": [...], "next": "<id>", "paused": [...]}`,
    /// `next` only when more instances follow.
    public let body: [UInt8]
    /// The ids of the page's instances, in order.
    public let instanceIDs: [String]
    /// The id to give as `after` for the next page; nil on the last one.
    public let next: String?

    /// `live`: the view's live instances (any order). `paused`: the bundles paused fleet-wide as
    /// the broker keeps them (contract §5), named on every page; what instances report paused is
    /// theirs to say in their own entries, never added to it (a heartbeat can be forged).
    public init(live: [FleetInstance], paused: [String], dropped: FleetDrops, request: Request, maxBytes: Int = FleetPage.maxBytes) {
        let after = request.after
        let candidates = live.filter { after == nil || $0.id > after! }.sorted { $0.id < $1.id }
        var instances: [UInt8] = []
        var ids: [String] = []
        var next: String?
        for instance in candidates {
            if ids.count >= max(request.limit, 1) {
                next = ids.last
                break
            }
            let encoded = Self.json(instance)
            if !ids.isEmpty, instances.count + 2 + encoded.count > maxBytes {
                next = ids.last
                break
            }
            instances += ids.isEmpty ? encoded : Array(",\n".utf8) + encoded
            ids.append(instance.id)
        }
        var body = Array(#"{"dropped":"#.utf8) + Self.json(dropped)
        body += Array(#","instances":[\#n"#.utf8) + instances + Array("\n]".utf8)
        if let next { body += Array(#","next":"#.utf8) + Self.json(next) }
        body += Array(#","paused":"#.utf8) + Self.json(paused.sorted()) + Array("}\n".utf8)
        self.body = body
        self.instanceIDs = ids
        self.next = next
    }

    /// `FleetJSON`'s form (sorted keys, RFC 3339 dates); our own value types always encode.
    static func json(_ value: some Encodable) -> [UInt8] {
        Array((try? FleetJSON.encoder.encode(value)) ?? Data("null".utf8))
    }
}
