import APNSJSON
import APNSModel
import Foundation

/// A registration change from the sync server (contract §6), parsed and validated with no IO
/// (here rather than in APNSRegistry so that its fuzz target needs no PostgreSQL client).
///
/// Every field becomes a database value, so every one is checked here, before PostgreSQL sees it
/// (contract §4, §6): `bundleId` 1 to 155 bytes of letters, digits, `.` and `-`; `group` 1 to 200
/// bytes of UTF-8 without control characters; a body over 64 KiB is malformed.
/// Decisions where the contract is silent: `null` means absent; unknown fields are ignored, and
/// the body is read as §2 reads a job's (nesting over 64 levels or a key twice is malformed); a
/// token is 2 to `maxTokenHexDigits` hex digits of whole bytes (stored lower case; Apple's tokens
/// are 32 bytes, documented as variable, 100 bytes leaves room); `group` on an unregister is not
/// needed, but one that is there is held to §6's type and rule like any other field (the schema
/// says so too: a field's type does not depend on `op`); `at` must be a whole number (`1e3` counts, as in JSON Schema) of 0 or more and at most `maxFutureMilliseconds` ahead of the clock of
/// whoever parses it (a device's changes apply in `at` order, so an `at` of
/// `Int64.max` would make every later change to the device lose, for ever). Only the future is
/// bounded: a message waits in a queue, so it is read later than it was written, never earlier,
/// and a registration valid when sent stays valid; one from a clock too far ahead is malformed
/// (dead-lettered) and can be requeued from the dead queue once its time has come.
public struct RegistrationMessage: Sendable, Hashable {
    public enum Operation: String, Sendable, Hashable {
        case register, unregister
    }

    public var op: Operation
    public var bundleID: String
    /// Lower-case hex.
    public var token: String
    /// For `register`: the device's group.
    public var group: String?
    public var environment: APNSEnvironment
    /// When the sync server made the change, ms since the epoch.
    public var at: Int64

    public static let maxTokenHexDigits = 200
    public static let maxBodyBytes = 64 * 1024
    /// Deepest nesting read, as for a job (contract §2).
    public static let maxDepth = 64
    /// How far ahead of the reader's clock `at` may be: 10 minutes, ample for clocks that NTP
    /// keeps within milliseconds, and the longest a forged or broken `at` can hold a device.
    public static let maxFutureMilliseconds: Int64 = 10 * 60 * 1000

    /// Milliseconds since the epoch, now: the default reader's clock.
    public static func currentMilliseconds() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    public init(op: Operation, bundleID: String, token: String, group: String?, environment: APNSEnvironment = .production, at: Int64) {
        self.op = op
        self.bundleID = bundleID
        self.token = token.lowercased()
        self.group = group
        self.environment = environment
        self.at = at
    }

    /// Parses and validates one body; `now` (ms since the epoch) bounds `at`.
    public static func parse(body: [UInt8], now: Int64 = currentMilliseconds()) -> Result<RegistrationMessage, JobError> {
        do throws(JobError) {
            return .success(try parseOrThrow(body, now: now))
        } catch {
            return .failure(error)
        }
    }

    static func parseOrThrow(_ body: [UInt8], now: Int64) throws(JobError) -> RegistrationMessage {
        guard body.count <= maxBodyBytes else { throw malformed("body", "the body is \(body.count) bytes; at most \(maxBodyBytes) are accepted") }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: body, maxDepth: maxDepth)
        } catch {
            throw malformed("body", error.description)
        }
        guard case .object(let fields) = value else { throw malformed("body", "must be a JSON object") }
        func string(_ name: String, required: Bool) throws(JobError) -> String? {
            guard let v = fields[name], v != .null else {
                if required { throw malformed(name, "is required") }
                return nil
            }
            guard case .string(let s) = v else { throw malformed(name, "must be a string, got \(v.typeName)") }
            return s
        }
        let opText = try string("op", required: true)!
        guard let op = Operation(rawValue: opText) else { throw malformed("op", "must be register or unregister") }
        let bundleID = try string("bundleId", required: true)!
        guard UntrustedText.isBundleID(bundleID) else {
            throw malformed("bundleId", "must be 1 to \(UntrustedText.maxBundleIDBytes) bytes of letters, digits, '.' and '-'")
        }
        let token = try string("token", required: true)!
        guard DeviceToken(hex: token) != nil, token.utf8.count <= maxTokenHexDigits else {
            throw malformed("token", "must be 2 to \(maxTokenHexDigits) hex digits of whole bytes")
        }
        var group: String? = nil
        if let g = try string("group", required: op == .register) {
            if let problem = GroupJob.problem(group: g) { throw malformed("group", problem) }
            if op == .register { group = g }
        }
        var environment = APNSEnvironment.production
        if let name = try string("environment", required: false) {
            guard let env = APNSEnvironment(rawValue: name) else { throw malformed("environment", "must be production or sandbox") }
            environment = env
        }
        guard let atValue = fields["at"], atValue != .null else { throw malformed("at", "is required") }
        guard let at = atValue.wholeNumberValue else {
            if case .number = atValue { throw malformed("at", "must be a whole number of ms since the epoch, got a fraction or a number beyond 2^63−1") }
            throw malformed("at", "must be an integer (ms since the epoch), got \(atValue.typeName)")
        }
        guard at >= 0 else { throw malformed("at", "must be 0 or more (ms since the epoch), got \(at)") }
        let latest = now.addingReportingOverflow(maxFutureMilliseconds)
        guard latest.overflow || at <= latest.partialValue else {
            throw malformed(
                "at", "is \(at &- now) ms ahead of this worker's clock; at most \(maxFutureMilliseconds) ms (a sync server's clock, or ms mistaken for another unit?)")
        }
        return RegistrationMessage(op: op, bundleID: bundleID, token: token, group: group, environment: environment, at: at)
    }

    static func malformed(_ field: String, _ message: String) -> JobError {
        JobError(kind: .malformedJob, field: field, message: message)
    }
}
