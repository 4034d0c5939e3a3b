/// A registration change from the sync server (contract §6), parsed and validated with no IO.
///
/// Decisions where the contract is silent: `null` means absent; unknown fields are ignored; a
/// token is 1 to `maxTokenHexDigits` hex digits of whole bytes (stored lower case); `bundleId` is
/// 1 to 255 bytes with no whitespace; `group` on an unregister is ignored; `at` must be 0 or more.
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

    public static let maxTokenHexDigits = 512
    public static let maxBundleIDBytes = 255

    public init(op: Operation, bundleID: String, token: String, group: String?, environment: APNSEnvironment = .production, at: Int64) {
        self.op = op
        self.bundleID = bundleID
        self.token = token.lowercased()
        self.group = group
        self.environment = environment
        self.at = at
    }

    public static func parse(body: [UInt8]) -> Result<RegistrationMessage, JobError> {
        do throws(JobError) {
            return .success(try parseOrThrow(body))
        } catch {
            return .failure(error)
        }
    }

    static func parseOrThrow(_ body: [UInt8]) throws(JobError) -> RegistrationMessage {
        guard body.count <= 16 * 1024 else { throw malformed("body", "the body is \(body.count) bytes; at most 16384 are accepted") }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: body, maxDepth: 16)
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
        guard (1...maxBundleIDBytes).contains(bundleID.utf8.count), !bundleID.contains(where: { $0.isWhitespace }) else {
            throw malformed("bundleId", "must be 1 to \(maxBundleIDBytes) bytes without whitespace")
        }
        let token = try string("token", required: true)!
        guard DeviceToken(hex: token) != nil, token.utf8.count <= maxTokenHexDigits else {
            throw malformed("token", "must be 2 to \(maxTokenHexDigits) hex digits of whole bytes")
        }
        var group: String? = nil
        if op == .register {
            let g = try string("group", required: true)!
            guard (1...GroupJob.maxGroupBytes).contains(g.utf8.count) else {
                throw malformed("group", "must be 1 to \(GroupJob.maxGroupBytes) bytes, got \(g.utf8.count)")
            }
            group = g
        }
        var environment = APNSEnvironment.production
        if let name = try string("environment", required: false) {
            guard let env = APNSEnvironment(rawValue: name) else { throw malformed("environment", "must be production or sandbox") }
            environment = env
        }
        guard let atValue = fields["at"], atValue != .null else { throw malformed("at", "is required") }
        guard case .integer(let at) = atValue, at >= 0 else {
            throw malformed("at", "must be an integer (ms since the epoch), got \(atValue.typeName)")
        }
        return RegistrationMessage(op: op, bundleID: bundleID, token: token, group: group, environment: environment, at: at)
    }

    static func malformed(_ field: String, _ message: String) -> JobError {
        JobError(kind: .malformedJob, field: field, message: message)
    }
}
