@_spi(APNSWorker) import APNSJSON
import APNSModel
import Foundation

/// A group job (contract §6): one message from the sync server for every active device of a
/// group. Parsed and validated as a whole before any fan-out; `jobBody(...)` builds the section-2
/// job for one device with the group job's payload bytes exactly as received (whitespace removed).
public struct GroupJob: Sendable, Hashable {
    /// The group: 1 to `maxGroupBytes` bytes of UTF-8 without control characters.
    public var group: String
    /// The group job's id (section 2's rules; see `GroupJobParser`).
    public var id: UUID
    /// Tokens not to notify, lower case.
    public var except: Set<String>
    /// Only devices of these bundle IDs; nil = every bundle.
    public var bundleIDs: Set<String>?
    /// The raw members copied into every device's job (payload, pushType, priority, expiration,
    /// collapseId, events), each as `"key":value` text, in that order.
    var copiedMembers: [UInt8]
    /// The group job's `userInfo` members.
    public var userInfo: [String: JSONValue]

    public static let maxGroupBytes = 200

    /// Why a group name is refused (contract §6: 1 to 200 bytes of UTF-8 without control
    /// characters; PostgreSQL refuses NUL in text, and the name reaches logs), or nil. The one
    /// rule for registrations and group jobs.
    public static func problem(group: String) -> String? {
        let count = group.utf8.count
        guard (1...maxGroupBytes).contains(count) else { return "must be 1 to \(maxGroupBytes) bytes, got \(count)" }
        guard UntrustedText.isPlain(group, maxBytes: maxGroupBytes) else { return "must not contain control characters" }
        return nil
    }

    /// Whether a device is notified, apart from its registry state.
    public func includes(bundleID: String, token: String) -> Bool {
        if let bundleIDs, !bundleIDs.contains(bundleID) { return false }
        return !except.contains(token.lowercased())
    }

    /// The section-2 job body for one device: its token and environment, the UUIDv5 id, the
    /// group job's payload fields, and `userInfo` plus `group` and `groupJobId`.
    public func jobBody(bundleID: String, token: String, environment: APNSEnvironment) -> (id: UUID, body: [UInt8]) {
        let id = UUIDv5.fanOutJobID(groupJobID: self.id, bundleID: bundleID, token: token)
        var info = userInfo
        info["group"] = .string(group)
        info["groupJobId"] = .string(self.id.uuidString.lowercased())
        var out: [UInt8] = []
        out.reserveCapacity(copiedMembers.count + 256)
        out += Array(#"{"token":"#.utf8)
        JSONValue.string(token.lowercased()).append(to: &out)
        out += Array(#","environment":"#.utf8)
        JSONValue.string(environment.rawValue).append(to: &out)
        out += Array(#","id":"#.utf8)
        JSONValue.string(id.uuidString.lowercased()).append(to: &out)
        out += Array(#","userInfo":"#.utf8)
        JSONValue.object(info).append(to: &out)
        out += copiedMembers
        out.append(UInt8(ascii: "}"))
        return (id, out)
    }
}

/// Parses group jobs (contract §6). Decisions where the contract is silent:
/// - no `id` and no UUID `message_id`: the id is the UUIDv5 (URL namespace) of `body:<SHA-256 of
///   the body in hex>`, so a redelivered group job fans out to the same job ids;
/// - `except` and `bundleIds` must be arrays of strings (`null` = absent); `except` entries need
///   not be hex (they simply match no token otherwise);
/// - `token` and `environment` in a group job are ignored: each device's own are used;
/// - the payload fields are validated by `JobParser` exactly as a device's job will be on the
///   HTTP/2 transport (a binary bundle's stricter limits apply when its job is sent).
public enum GroupJobParser {
    public static func parse(body: [UInt8], messageID: String?, limits: JobParser.Limits = .init()) -> Result<GroupJob, JobError> {
        guard body.count <= limits.maxBodyBytes else {
            return .failure(.malformed("body", "the body is \(body.count) bytes; at most \(limits.maxBodyBytes) are accepted"))
        }
        let parsed: Result<GroupJob, JobError> = body.withUnsafeBufferPointer { buffer in
            do throws(JobError) {
                return .success(try parse(buffer, messageID: messageID, maxDepth: limits.maxDepth))
            } catch {
                return .failure(error)
            }
        }
        guard case .success(let job) = parsed else { return parsed }
        // Validate the payload fields as section 2 would, on a device job built from them.
        let probe = job.jobBody(bundleID: "group.validation", token: "00", environment: .production).body
        switch JobParser.parse(body: probe, bundleID: "group.validation", messageID: nil, defaultEnvironment: .production, transport: .http2, limits: limits) {
        case .success: return parsed
        case .failure(let error): return .failure(error)
        }
    }

    private static func parse(_ body: UnsafeBufferPointer<UInt8>, messageID: String?, maxDepth: Int) throws(JobError) -> GroupJob {
        if let bad = JSONReader.firstInvalidUTF8Offset(body) {
            throw .malformed("body", "the body is not valid UTF-8 (byte \(bad))")
        }
        let members: JSONTopLevelObject
        do {
            members = try JSONReader.parseTopLevelObject(body, maxDepth: maxDepth)
        } catch {
            throw .malformed("body", "invalid JSON at byte \(error.offset): \(error.message)")
        }
        func present(_ name: String) -> JSONTopLevelMember? {
            guard let member = members[name], member.value != .null else { return nil }
            return member
        }
        guard let groupValue = present("group")?.value else { throw .malformed("group", "is required") }
        guard case .string(let group) = groupValue else { throw .malformed("group", "must be a string, got \(groupValue.typeName)") }
        if let problem = GroupJob.problem(group: group) { throw .malformed("group", problem) }
        func strings(_ name: String) throws(JobError) -> [String]? {
            guard let value = present(name)?.value else { return nil }
            guard case .array(let items) = value else { throw .malformed(name, "must be an array of strings, got \(value.typeName)") }
            var out: [String] = []
            for item in items {
                guard case .string(let s) = item else { throw .malformed(name, "must hold strings only, got \(item.typeName)") }
                out.append(s)
            }
            return out
        }
        let except = try strings("except") ?? []
        let bundleIDs = try strings("bundleIds")
        var userInfo: [String: JSONValue] = [:]
        if let value = present("userInfo")?.value {
            guard case .object(let info) = value else { throw .malformed("userInfo", "must be an object, got \(value.typeName)") }
            userInfo = info
        }
        let id: UUID
        if let value = present("id")?.value {
            guard case .string(let text) = value, let parsed = JobParser.canonicalUUID(text) else {
                throw .malformed("id", "must be a canonical UUID (8-4-4-4-12 hex digits)")
            }
            id = parsed
        } else if let messageID, let parsed = JobParser.canonicalUUID(messageID) {
            id = parsed
        } else {
            let digest = NameDigest.sha256(body).map { String(format: "%02x", $0) }.joined()
            id = UUIDv5.make(name: "body:\(digest)")
        }
        var copied: [UInt8] = []
        for name in ["payload", "pushType", "priority", "expiration", "collapseId", "events"] {
            guard let member = present(name) else { continue }
            copied += Array(",\"\(name)\":".utf8)
            let text = UnsafeBufferPointer(rebasing: body[member.range])
            copied += member.hasWhitespace ? JSONReader.compact(text) : Array(text)
        }
        return GroupJob(
            group: group, id: id, except: Set(except.map { $0.lowercased() }), bundleIDs: bundleIDs.map(Set.init),
            copiedMembers: copied, userInfo: userInfo)
    }
}

extension JSONValue {
    /// Appends this value as compact JSON text (object keys sorted, so the text is deterministic).
    public func append(to out: inout [UInt8]) {
        switch self {
        case .null: out += Array("null".utf8)
        case .bool(let b): out += Array((b ? "true" : "false").utf8)
        case .integer(let i): out += Array(String(i).utf8)
        case .number(let d): out += Array((d.isFinite ? "\(d)" : "null").utf8)
        case .string(let s):
            out.append(UInt8(ascii: "\""))
            for scalar in s.unicodeScalars {
                switch scalar {
                case "\"": out += Array(#"\""#.utf8)
                case "\\": out += Array(#"\\"#.utf8)
                case "\n": out += Array(#"\n"#.utf8)
                case "\r": out += Array(#"\r"#.utf8)
                case "\t": out += Array(#"\t"#.utf8)
                default:
                    if scalar.value < 0x20 {
                        out += Array(String(format: "\\u%04x", scalar.value).utf8)
                    } else {
                        out += Array(String(scalar).utf8)
                    }
                }
            }
            out.append(UInt8(ascii: "\""))
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.append(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, key) in members.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.string(key).append(to: &out)
                out.append(UInt8(ascii: ":"))
                members[key]!.append(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }
}
