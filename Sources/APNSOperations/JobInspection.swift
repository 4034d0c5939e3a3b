/// Pure rules of the operator tools, with no IO: how a queued message reads as a `QueuedJob`,
/// which jobs a filter selects, and how a requeued job's headers are rewritten.
import AMQPClient
@_spi(APNSWorker) import APNSJSON
import APNSModel
import APNSTopology
import APNSTopologyNames
import Foundation

public enum JobInspection {
    /// The body with the value of `"token"` cut to its redacted form, for what people read
    /// (`show`, the admin page); scripts get the body as stored (`--json`, the JSON API).
    /// A body that is not a JSON object with a `token` (the malformed jobs an operator looks at
    /// most) has every long hexadecimal run cut instead, since a token may sit anywhere in it.
    /// The rest of the body is shown as stored: the token's value is replaced where it lies
    /// (the job reader's strict parser gives its bytes). Not re-serialized with
    /// `JSONSerialization`'s `.sortedKeys`, which on Linux sorts keys through ICU's collator:
    /// every page view with a dead letter faulted ICU's data into the worker.
    public static func redactingToken(_ body: String) -> String {
        var bytes = Array(body.utf8)
        let token: (range: Range<Int>, value: String)? = bytes.withUnsafeBufferPointer { buffer in
            guard JSONReader.firstInvalidUTF8Offset(buffer) == nil,
                let object = try? JSONReader.parseTopLevelObject(buffer, maxDepth: JobParser.Limits().maxDepth),
                let member = object["token"], let value = member.value.stringValue
            else { return nil }
            return (member.range, value)
        }
        guard let token else { return redactingHexRuns(body) }
        // Hex digits and "…": nothing in the redacted form needs escaping in a JSON string.
        let redacted = "\"" + (DeviceToken(hex: token.value)?.redacted ?? "…") + "\""
        bytes.replaceSubrange(token.range, with: redacted.utf8)
        return redactingHexRuns(String(decoding: bytes, as: UTF8.self))
    }

    /// Hex digits in a row from which a run counts as a device token: tokens are 64 digits (32
    /// bytes) or more; a UUID's longest run is 12, so job ids stay readable.
    public static let redactedHexRunLength = 32

    /// Every run of at least `redactedHexRunLength` hex digits cut to its first and last four.
    public static func redactingHexRuns(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        var run = ""
        func flush() {
            out += run.count >= redactedHexRunLength ? "\(run.prefix(4))…\(run.suffix(4))" : run
            run = ""
        }
        for character in text {
            if character.isHexDigit, character.isASCII {
                run.append(character)
            } else {
                flush()
                out.append(character)
            }
        }
        flush()
        return out
    }

    /// Decodes a message of `queue` (a dead or retry queue of `bundleID`).
    /// A body cut by a listing (`oversizedBodySize` set) is not parsed: the job's id is then its
    /// `message_id`, and its size is kept in `bodySize`.
    public static func queuedJob(_ message: AMQPDeliveredMessage, queue: String, bundleID: String, position: Int) -> QueuedJob {
        let envelope = JobEnvelope(message)
        let cutSize = message.oversizedBodySize.map { Int(clamping: $0) }
        let body = cutSize == nil ? try? JSONValue(parsing: message.body) : nil
        let bodyID = body?["id"]?.stringValue
        let token = body?["token"]?.stringValue.flatMap(DeviceToken.init(hex:))
        return QueuedJob(
            queue: queue, bundleID: bundleID, position: position,
            jobID: bodyID ?? message.properties.messageID,
            reason: envelope.failureReason,
            status: envelope.status,
            attempts: envelope.attempts ?? envelope.attempt,
            failedAt: envelope.failureTime,
            publishedAt: message.properties.timestamp,
            error: envelope.failureDetail,
            lastReason: envelope.lastReason,
            headers: envelope.headers.mapValues(render),
            body: String(decoding: message.body, as: UTF8.self),
            tokenRedacted: token?.redacted, bodySize: cutSize)
    }

    /// Whether `filter` selects `job` at time `now`. A job without any date matches no age filter.
    public static func matches(_ job: QueuedJob, _ filter: JobFilter, now: Date) -> Bool {
        if let bundle = filter.bundleID, bundle != job.bundleID { return false }
        if let reason = filter.reason {
            let actual = job.reason ?? job.lastReason
            guard let actual, actual.caseInsensitiveCompare(reason) == .orderedSame else { return false }
        }
        if filter.olderThan != nil || filter.newerThan != nil {
            guard let date = job.referenceDate else { return false }
            let age = now.timeIntervalSince(date)
            if let older = filter.olderThan, age < older.timeInterval { return false }
            if let newer = filter.newerThan, age > newer.timeInterval { return false }
        }
        return true
    }

    /// Whether `selection` selects `job`.
    public static func selects(_ selection: JobSelection, _ job: QueuedJob, now: Date) -> Bool {
        switch selection {
        case .jobIDs(let ids): return job.jobID.map { id in ids.contains(id) } ?? false
        case .all(let filter): return matches(job, filter, now: now)
        }
    }

    /// Whether the worker dropped this dead job's header table when it ended it (properties over
    /// 16 KiB, or nested too deep: contract §4): the headers the publisher sent (`traceparent`,
    /// its own) are gone, so a requeued copy goes back without them. Read from the job's own
    /// `x-apns-reason` and `x-apns-error`.
    public static func headersWereDropped(_ message: AMQPDeliveredMessage) -> Bool {
        let envelope = JobEnvelope(message)
        guard envelope.reason == JobError.Kind.malformedJob.rawValue, let error = envelope.error else { return false }
        return error.hasSuffix(JobError.headerTableDropped)
    }

    /// The message that goes back to the bundle's work queue: body and properties unchanged
    /// except the headers, where attempts start again, the failure headers are dropped and the
    /// reason it failed with is kept in `x-apns-last-reason` (an earlier one when this failure
    /// has none, as on retry jobs). `user_id` and `expiration` are dropped
    /// (`AMQPProperties.republished`, contract §4).
    public static func requeueMessage(_ message: AMQPDeliveredMessage, bundleID: String) -> AMQPOutboundMessage {
        let properties = message.properties.republished { $0.requeue() }
        return AMQPOutboundMessage(
            exchange: "", routingKey: TopologyNames.workQueue(bundleID), body: message.body, properties: properties)
    }

    /// The queues of `kind` for a bundle: its dead queue, or one retry queue per distinct delay.
    public static func queues(_ kind: JobQueueKind, bundleID: String, retryDelays: [Duration]) -> [String] {
        switch kind {
        case .dead:
            return [TopologyNames.deadQueue(bundleID)]
        case .retry:
            var names: [String] = []
            for delay in retryDelays {
                let name = TopologyNames.retryQueue(bundleID, delay: delay)
                if !names.contains(name) { names.append(name) }
            }
            return names
        }
    }

    /// An AMQP header value as text: strings as they are, numbers in decimal, tables and arrays
    /// (such as `x-death`) as compact JSON-like text.
    public static func render(_ value: AMQPFieldValue) -> String {
        switch value {
        case .bool(let v): return String(v)
        case .int8(let v): return String(v)
        case .int16(let v): return String(v)
        case .int32(let v): return String(v)
        case .int64(let v): return String(v)
        case .float(let v): return String(v)
        case .double(let v): return String(v)
        case .decimal(let scale, let v): return String(Double(v) / pow(10, Double(scale)))
        case .string(let s): return s
        case .bytes(let b): return String(decoding: b, as: UTF8.self)
        // Not `.formatted(.iso8601)`: ICU's on Linux, reached by any publisher's header.
        case .timestamp(let d): return RFC3339.string(from: d)
        case .table(let t):
            let fields = t.keys.sorted().map { "\(quoted($0)):\(nested(t[$0]!))" }
            return "{" + fields.joined(separator: ",") + "}"
        case .array(let a): return "[" + a.map(nested).joined(separator: ",") + "]"
        case .void: return ""
        }
    }

    private static func nested(_ value: AMQPFieldValue) -> String {
        switch value {
        case .string, .bytes, .timestamp: return quoted(render(value))
        case .void: return "null"
        default: return render(value)
        }
    }

    private static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

