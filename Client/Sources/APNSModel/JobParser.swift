@_spi(APNSWorker) import APNSJSON
import Foundation

/// Turns a message body into a `Job` or a precise `JobError` (contract §2). Pure: no IO, no
/// clock; the id generator for jobs without an id is a parameter so tests are deterministic.
///
/// Decisions where the contract is silent:
/// - `null` for an optional field means the field is absent; `collapseId: ""` means no collapse id.
/// - `priority` and `expiration` are integers as JSON Schema counts them: `10.0` and `1e3` are
///   whole numbers and accepted (docs/schemas/ can only say "integer", not how it is written).
/// - Duplicate keys anywhere in the body make it malformed: what we validate must be what Apple sees.
/// - The payload is sent with its original key order, escapes and number lexemes; only the
///   whitespace between tokens is removed, and the size limit applies to those compact bytes.
/// - Binary transport: the token must be 32 bytes, the payload at most 2048 bytes, priority 10 or
///   5 (the binary protocol defines no other), expiration at most 2^32 - 1 (a 4-byte item);
///   `pushType` and `collapseId` are validated but have no item in that protocol.
/// - Broadcast jobs (contract §7): `channel` instead of `token` (both, or neither, is malformed);
///   the channel id is checked by `BroadcastChannel` (base64, a length cap, so no control
///   characters reach the `apns-channel-id` header). The push type is `liveactivity` whether
///   given or omitted, the payload limit 5120 bytes. `collapseId` is malformed on a broadcast:
///   Apple's broadcast request has no collapse id, and dropping it silently would surprise the
///   sender. On a binary-transport bundle a broadcast job is malformed (the legacy API has none).
/// - Bodies larger than `Limits.maxBodyBytes` are refused before any parsing, so a 10 MB body
///   costs one comparison; nesting deeper than `Limits.maxDepth` is refused without recursion
///   beyond that depth.
public enum JobParser {
    public struct Limits: Sendable, Hashable {
        /// Largest body parsed at all. A job is at most a 5 KiB payload plus a few fields and
        /// some metadata, so 64 KiB leaves ample room while bounding the work per message.
        public var maxBodyBytes: Int
        /// Deepest nesting of arrays and objects accepted anywhere in the body.
        public var maxDepth: Int

        public init(maxBodyBytes: Int = 64 * 1024, maxDepth: Int = 64) {
            self.maxBodyBytes = maxBodyBytes
            self.maxDepth = maxDepth
        }
    }

    /// The largest payload, in bytes as sent, for a push type on a transport; a broadcast (Apple's
    /// "Sending broadcast push notification requests to APNs") allows 5120.
    public static func payloadLimit(pushType: PushType, transport: TransportKind, broadcast: Bool = false) -> Int {
        switch transport {
        case .binary: return 2048
        case .http2: return pushType == .voip || broadcast ? 5120 : 4096
        }
    }

    /// Parses and validates one job body.
    /// - Parameters:
    ///   - bundleID: the bundle the job was consumed for; the topic is derived from it.
    ///   - messageID: the AMQP `message_id`, used as the job id when the body has none and it is
    ///     a canonical UUID.
    ///   - defaultEnvironment: the bundle's configured environment, unless the job overrides it.
    ///   - makeID: the id of a job that has neither an `id` nor a UUID `message_id`.
    public static func parse(
        body: [UInt8], bundleID: String, messageID: String?, defaultEnvironment: APNSEnvironment,
        transport: TransportKind, limits: Limits = Limits(), makeID: () -> UUID = { UUID() }
    ) -> Result<Job, JobError> {
        guard body.count <= limits.maxBodyBytes else {
            return .failure(.malformed("body", "the body is \(body.count) bytes; at most \(limits.maxBodyBytes) are accepted"))
        }
        return body.withUnsafeBufferPointer { buffer in
            do throws(JobError) {
                return .success(try parse(
                    buffer, bundleID: bundleID, messageID: messageID, defaultEnvironment: defaultEnvironment,
                    transport: transport, limits: limits, makeID: makeID))
            } catch {
                return .failure(error)
            }
        }
    }

    private static func parse(
        _ body: UnsafeBufferPointer<UInt8>, bundleID: String, messageID: String?,
        defaultEnvironment: APNSEnvironment, transport: TransportKind, limits: Limits, makeID: () -> UUID
    ) throws(JobError) -> Job {
        if let bad = JSONReader.firstInvalidUTF8Offset(body) {
            throw .malformed("body", "the body is not valid UTF-8 (byte \(bad))")
        }
        let object: JSONTopLevelObject
        do {
            object = try JSONReader.parseTopLevelObject(body, maxDepth: limits.maxDepth, skimming: "payload")
        } catch {
            throw .malformed("body", "invalid JSON at byte \(error.offset): \(error.message)")
        }
        func present(_ name: String) -> JSONTopLevelMember? {
            guard let member = object[name], member.value != .null else { return nil }
            return member
        }

        // target: a device token, or a broadcast channel (contract §7)
        let target = try parseTarget(token: present("token")?.value, channel: present("channel")?.value, transport: transport)
        let isBroadcast = target.channel != nil

        // payload (skimmed, not built: only these facts about it are needed)
        guard let payloadMember = object.skimmed, payloadMember.summary.kind != .null else {
            throw .malformed("payload", "is required")
        }
        let summary = payloadMember.summary
        guard summary.kind == .object else {
            throw .malformed("payload", "must be an object, got \(summary.kind.typeName)")
        }
        guard let apsKind = summary.aps else { throw .malformed("payload.aps", "is required in the payload") }
        guard apsKind == .object else { throw .malformed("payload.aps", "must be an object, got \(apsKind.typeName)") }
        let payloadText = UnsafeBufferPointer(rebasing: body[payloadMember.range])
        let payload = payloadMember.hasWhitespace ? JSONReader.compact(payloadText) : Array(payloadText)

        // pushType
        let pushType: PushType
        if let value = present("pushType")?.value {
            guard case .string(let name) = value else {
                throw .malformed("pushType", "must be a string, got \(value.typeName)")
            }
            guard let known = PushType(rawValue: name) else {
                let allowed = PushType.allCases.map(\.rawValue).joined(separator: ", ")
                throw .malformed("pushType", "unknown push type \"\(printable(name))\"; expected one of \(allowed)")
            }
            if isBroadcast, known != .liveactivity {
                throw .malformed("pushType", "a broadcast job (channel) must be liveactivity, got \(known.rawValue)")
            }
            pushType = known
        } else if isBroadcast {
            pushType = .liveactivity
        } else {
            let silent = summary.contentAvailableIsOne
                && !summary.apsHasAlert && !summary.apsHasSound && !summary.apsHasBadge
            pushType = silent ? .background : .alert
        }

        let limit = payloadLimit(pushType: pushType, transport: transport, broadcast: isBroadcast)
        guard payload.count <= limit else {
            let kind = isBroadcast ? "a broadcast" : pushType.rawValue
            throw JobError(
                kind: .payloadTooLarge, field: "payload",
                message: "is \(payload.count) bytes as sent; at most \(limit) for \(kind) on \(transport.rawValue)")
        }

        // priority
        let priority: Int
        if let value = present("priority")?.value {
            guard let p = value.wholeNumberValue else {
                throw .malformed("priority", "must be an integer, got \(value.typeName)")
            }
            switch transport {
            case .http2:
                guard p == 10 || p == 5 || p == 1 else { throw .malformed("priority", "must be 10, 5 or 1, got \(p)") }
            case .binary:
                guard p == 10 || p == 5 else {
                    throw .malformed("priority", "must be 10 or 5 on the binary transport, got \(p)")
                }
            }
            priority = Int(p)
        } else {
            priority = pushType == .background ? 5 : 10
        }

        // expiration
        var expiration: Int? = nil
        if let value = present("expiration")?.value {
            guard let e = value.wholeNumberValue else {
                throw .malformed("expiration", "must be an integer (UNIX seconds), got \(value.typeName)")
            }
            guard e >= 0 else { throw .malformed("expiration", "must be 0 or more, got \(e)") }
            if transport == .binary && e > Int64(UInt32.max) {
                throw .malformed("expiration", "must fit 32 bits on the binary transport, got \(e)")
            }
            expiration = Int(e)
        }

        // collapseId
        var collapseID: String? = nil
        if let value = present("collapseId")?.value {
            guard case .string(let c) = value else {
                throw .malformed("collapseId", "must be a string, got \(value.typeName)")
            }
            guard c.utf8.count <= 64 else {
                throw .malformed("collapseId", "is \(c.utf8.count) bytes; at most 64")
            }
            // It goes out as the `apns-collapse-id` header value with NIOHTTP2's validation off
            // (contract §2, §4): the parser is the only gate against CR, LF, NUL and blank ends.
            if let problem = UntrustedText.headerValueProblem(c) { throw .malformed("collapseId", problem) }
            collapseID = c.isEmpty ? nil : c
        }

        if isBroadcast, collapseID != nil {
            throw .malformed("collapseId", "a broadcast job (channel) cannot have one: Apple's broadcast request has no collapse id")
        }

        // id
        let id: UUID
        var idGenerated = false
        if let value = present("id")?.value {
            guard case .string(let text) = value else {
                throw .malformed("id", "must be a string holding a UUID, got \(value.typeName)")
            }
            guard let parsed = canonicalUUID(text) else {
                throw .malformed("id", "\"\(printable(text))\" is not a canonical UUID (8-4-4-4-12 hex digits)")
            }
            id = parsed
        } else if let messageID, let parsed = canonicalUUID(messageID) {
            id = parsed
        } else {
            id = makeID()
            idGenerated = true
        }

        // environment
        var environment = defaultEnvironment
        if let value = present("environment")?.value {
            guard case .string(let name) = value else {
                throw .malformed("environment", "must be a string, got \(value.typeName)")
            }
            guard let env = APNSEnvironment(rawValue: name) else {
                throw .malformed("environment", "must be production or sandbox, got \"\(printable(name))\"")
            }
            environment = env
        }

        // userInfo
        var userInfo: [String: JSONValue] = [:]
        if let value = present("userInfo")?.value {
            guard case .object(let info) = value else {
                throw .malformed("userInfo", "must be an object, got \(value.typeName)")
            }
            userInfo = info
        }

        // events: a closed set, like environment; a value outside it is the sender's mistake,
        // which the sender learns from the dead letter (and the dead event of its bundle's setting).
        var events: DeliveryEventLevel?
        if let value = present("events")?.value {
            guard case .string(let name) = value else {
                throw .malformed("events", "must be a string, got \(value.typeName)")
            }
            guard let level = DeliveryEventLevel(rawValue: name) else {
                throw .malformed("events", "must be none, ends or all, got \"\(printable(name))\"")
            }
            events = level
        }

        var job = Job(
            id: id, bundleID: bundleID, target: target, payload: payload, pushType: pushType,
            priority: priority, expiration: expiration, collapseID: collapseID,
            environment: environment, userInfo: userInfo, events: events)
        job.idGenerated = idGenerated
        return job
    }

    /// The job's target from its `token` and `channel` fields (absent or null = nil): exactly one.
    private static func parseTarget(token: JSONValue?, channel: JSONValue?, transport: TransportKind) throws(JobError) -> PushTarget {
        switch (token, channel) {
        case (nil, nil):
            throw .malformed("token", "is required (or channel, for a broadcast job)")
        case (.some, .some):
            throw .malformed("channel", "a job has a token or a channel, not both")
        case (let tokenValue?, nil):
            guard case .string(let tokenHex) = tokenValue else {
                throw .malformed("token", "must be a string of hex digits, got \(tokenValue.typeName)")
            }
            return .device(try parseToken(tokenHex, transport: transport))
        case (nil, let channelValue?):
            guard transport == .http2 else {
                throw .malformed("channel", "broadcast jobs need the HTTP/2 transport; this bundle uses the binary provider API")
            }
            guard case .string(let id) = channelValue else {
                throw .malformed("channel", "must be a string (the base64 channel id Apple issued), got \(channelValue.typeName)")
            }
            if let problem = BroadcastChannel.problem(id) { throw .malformed("channel", problem) }
            guard let parsed = BroadcastChannel(id: id) else { throw .malformed("channel", "is not a channel id") }
            return .channel(parsed)
        }
    }

    /// Never echoes the token: a message may end up in logs and dead-letter headers.
    private static func parseToken(_ hex: String, transport: TransportKind) throws(JobError) -> DeviceToken {
        // The contract fixes no length on HTTP/2, but the token goes into `:path`: bounded.
        guard hex.utf8.count <= 2 * maxTokenBytes else {
            throw .malformed("token", "has \(hex.utf8.count) characters; at most \(2 * maxTokenBytes) hex digits (\(maxTokenBytes) bytes)")
        }
        guard let token = DeviceToken(hex: hex) else { throw diagnoseToken(hex) }
        if transport == .binary && token.bytes.count != 32 {
            throw .malformed("token", "must be 32 bytes (64 hex digits) on the binary transport, got \(token.bytes.count) bytes")
        }
        return token
    }

    /// Why `DeviceToken(hex:)` refused a token; only on the error path, so it may be slow.
    private static func diagnoseToken(_ hex: String) -> JobError {
        if hex.isEmpty { return .malformed("token", "is empty") }
        for (position, c) in hex.utf8.enumerated() {
            let isHex = (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
                || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "f"))
                || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "F"))
            if !isHex { return .malformed("token", "has a non-hex character at position \(position)") }
        }
        return .malformed("token", "has an odd number of hex digits (\(hex.utf8.count))")
    }

    /// The longest device token accepted, in bytes: today's tokens are 32, and Apple says not
    /// to assume that; 100 leaves room for longer ones while bounding `:path` (docs/decisions.md).
    public static let maxTokenBytes = 100

    /// A UUID in the canonical 8-4-4-4-12 form, either case; nil for anything else (braces,
    /// missing hyphens, other lengths), whatever `UUID(uuidString:)` would tolerate.
    public static func canonicalUUID(_ text: String) -> UUID? {
        if let parsed = text.utf8.withContiguousStorageIfAvailable(canonicalUUID) { return parsed }
        return Array(text.utf8).withUnsafeBufferPointer(canonicalUUID)
    }

    private static func canonicalUUID(_ utf8: UnsafeBufferPointer<UInt8>) -> UUID? {
        guard utf8.count == 36 else { return nil }
        // Written into the UUID's own 16 bytes: no array per job.
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let valid = withUnsafeMutableBytes(of: &uuid) { bytes in
            var nibbles = 0
            for (i, c) in utf8.enumerated() {
                if i == 8 || i == 13 || i == 18 || i == 23 {
                    guard c == UInt8(ascii: "-") else { return false }
                    continue
                }
                guard let v = DeviceToken.hexDigitValue(c) else { return false }
                bytes[nibbles / 2] |= nibbles % 2 == 0 ? v << 4 : v
                nibbles += 1
            }
            return true
        }
        return valid ? UUID(uuid: uuid) : nil
    }

    /// A value quoted in an error line: at most 40 characters, control characters replaced, so a
    /// hostile body cannot inject lines into logs or headers.
    private static func printable(_ text: String) -> String { LineSafeText.quoted(text, limit: 40) }
}
