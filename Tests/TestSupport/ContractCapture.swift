/// Keeps the messages the worker really wrote during the tests in `APNS_TEST_CAPTURE_DIR`, one
/// JSON file per message under `<kind>/`, named after docs/schemas/<kind>.schema.json: dead
/// letters' and retries' headers, feedback and delivery events, fan-out jobs and heartbeats, from the
/// end-to-end suites, from `OutcomeRouter` in OutcomeRouterTests (the routes no end-to-end test
/// reads back) and from `FleetService` in FleetAndFeedbackSeamTests. `scripts/test` sets the
/// directory and then runs `scripts/check-asyncapi.sh --captured` on it, so a schema that refuses
/// something the worker writes fails the run. Unset, nothing is written.
import AMQPClient
import Foundation
import Synchronization

public enum ContractCapture {
    public static let directory: String? = {
        guard let path = ProcessInfo.processInfo.environment["APNS_TEST_CAPTURE_DIR"], !path.isEmpty else { return nil }
        return path
    }()

    /// The headers of a message the worker moved to a dead queue.
    public static let deadLetterHeaders = "dead-letter-headers"
    /// The headers of a message the worker moved to a retry queue.
    public static let retryHeaders = "retry-headers"
    public static let feedbackEvent = "feedback-event"
    /// A delivery event on `apns.events` (contract §8).
    public static let deliveryEvent = "delivery-event"
    public static let job = "job"
    /// A heartbeat, pause or resume on `apns.fleet`.
    public static let fleetMessage = "fleet-message"

    /// Records what `queue` held, when it is a queue the worker writes to: a dead or retry queue
    /// (the headers), or a feedback queue (the body).
    public static func record(_ delivery: AMQPDelivery, from queue: String, isFeedback: Bool = false) {
        guard directory != nil else { return }
        if isFeedback {
            record(kind: feedbackEvent, json: delivery.message.body)
        } else if queue.hasSuffix(".dead") {
            record(kind: deadLetterHeaders, headers: delivery.message.properties.headers ?? [:])
        } else if queue.contains(".retry") {
            record(kind: retryHeaders, headers: delivery.message.properties.headers ?? [:])
        }
    }

    /// Records a message the worker is about to publish, by where it goes: a feedback event (the
    /// body), or a dead or retry queue (the headers).
    public static func record(_ message: AMQPOutboundMessage) {
        guard directory != nil else { return }
        if message.exchange == "apns.feedback" {
            record(kind: feedbackEvent, json: message.body)
        } else if message.exchange == "apns.events" {
            record(kind: deliveryEvent, json: message.body)
        } else if message.routingKey.hasSuffix(".dead") {
            record(kind: deadLetterHeaders, headers: message.properties.headers ?? [:])
        } else if message.routingKey.contains(".retry") {
            record(kind: retryHeaders, headers: message.properties.headers ?? [:])
        }
    }

    public static func record(kind: String, headers: AMQPTable) {
        guard directory != nil else { return }
        let object = headers.mapValues(jsonObject)
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        record(kind: kind, json: Array(data))
    }

    /// Files kept per kind: a bulk test's 10,000 fan-out jobs are all alike, and the check
    /// should not cost more than the suites.
    static let maximumPerKind = 300
    static let counts = Mutex<[String: Int]>([:])

    public static func record(kind: String, json: [UInt8]) {
        guard let directory else { return }
        let admitted = counts.withLock { counts in
            counts[kind, default: 0] += 1
            return counts[kind]! <= maximumPerKind
        }
        guard admitted else { return }
        let folder = directory + "/" + kind
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // A file that cannot be written is a missing kind at worst, which a full run reports.
        try? Data(json).write(to: URL(fileURLWithPath: folder + "/" + UUID().uuidString.lowercased() + ".json"))
    }

    /// A header value as the JSON a schema sees: integers as numbers, text as strings.
    static func jsonObject(_ value: AMQPFieldValue) -> Any {
        switch value {
        case .bool(let b): return b
        case .int8, .int16, .int32, .int64: return NSNumber(value: value.intValue!)
        case .float(let f): return Double(f)
        case .double(let d): return d
        case .decimal(let scale, let v): return Double(v) / pow(10, Double(scale))
        case .string(let s): return s
        case .bytes(let b): return String(decoding: b, as: UTF8.self)
        case .timestamp(let date): return date.timeIntervalSince1970
        case .table(let table): return table.mapValues(jsonObject)
        case .array(let items): return items.map(jsonObject)
        case .void: return NSNull()
        }
    }
}
