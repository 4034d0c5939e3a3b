import Foundation

/// What a transport learned about one notification. Every send produces exactly one.
public enum TransportResult: Sendable, Hashable {
    /// APNs answered over HTTP/2 (any status, 200 included).
    case http(HTTPAnswer)
    /// Binary provider API: no error response named this frame within the hold window while the
    /// connection stayed up, which is the only success signal that protocol has.
    case binaryAccepted
    /// Binary provider API: an error response (command 8) named this frame.
    case binaryRejected(status: UInt8)
    /// No answer: the connection or stream failed before APNs said anything about this one.
    case failed(TransportFailure)
}

/// An HTTP/2 answer from APNs.
public struct HTTPAnswer: Sendable, Hashable {
    public var status: Int
    /// The `reason` of the JSON error body; nil on 200.
    public var reason: APNSReason?
    /// The `timestamp` of the JSON error body (410): ms since the epoch.
    public var timestamp: Int64?
    /// The `apns-id` response header.
    public var apnsID: UUID?
    /// The `apns-unique-id` response header (sandbox only).
    public var uniqueID: String?

    public init(status: Int, reason: APNSReason? = nil, timestamp: Int64? = nil, apnsID: UUID? = nil, uniqueID: String? = nil) {
        self.status = status
        self.reason = reason
        self.timestamp = timestamp
        self.apnsID = apnsID
        self.uniqueID = uniqueID
    }
}

/// Why a transport has no answer for a notification. All of these are retried.
public enum TransportFailure: Sendable, Hashable, CustomStringConvertible {
    /// The connection closed or failed before the answer arrived.
    case connectionLost(String)
    /// The server reset the stream (RST_STREAM) with this HTTP/2 error code.
    case streamReset(UInt32)
    /// The per-request deadline passed.
    case timeout
    /// The server sent GOAWAY and this stream was not among those it processed, and it could not
    /// be sent again on a fresh connection before the deadline.
    case goaway
    /// No connection could be made (DNS, TCP, TLS handshake).
    case connectFailed(String)
    /// The transport is shutting down and did not send this notification.
    case shutdown
    /// The server answered with something no APNs answer is (a body over the transport's cap):
    /// the stream was reset and the answer not read.
    case malformedAnswer(String)

    public var description: String {
        switch self {
        case .connectionLost(let why): return "connection lost: \(why)"
        case .streamReset(let code): return "stream reset (HTTP/2 error \(code))"
        case .timeout: return "request deadline passed"
        case .goaway: return "GOAWAY before the answer"
        case .connectFailed(let why): return "connect failed: \(why)"
        case .shutdown: return "transport shut down"
        case .malformedAnswer(let why): return "malformed answer: \(why)"
        }
    }

    /// A stable name for headers and metrics.
    public var name: String {
        switch self {
        case .connectionLost: return "ConnectionLost"
        case .streamReset: return "StreamReset"
        case .timeout: return "Timeout"
        case .goaway: return "GoAway"
        case .connectFailed: return "ConnectFailed"
        case .shutdown: return "Shutdown"
        case .malformedAnswer: return "MalformedAnswer"
        }
    }
}

/// A transport: sends one notification and reports what became of it. Implementations own their
/// connections; `send` may be called concurrently and must never throw away a notification
/// silently: every call ends in exactly one result.
///
/// One requirement, with a completion: the transports live on NIO event loops and learn each
/// result there, and the worker's hot path handles it right there (a Swift task and a
/// continuation per notification, and the thread hops they cost, were a large share of its CPU;
/// docs/benchmarks.md, "No task per job"). Callers already in a task await the same send through
/// the extension below. See docs/architecture.md, "Execution model per layer".
public protocol NotificationTransport: Sendable {
    /// Sends `notification`; `completion` runs exactly once with the result, on whatever thread
    /// the transport learns it on (the connection's event loop), so it must be quick and never
    /// block. It may run before `send` returns (a notification refused before it is sent).
    func send(_ notification: PushNotification, completion: @escaping @Sendable (TransportResult) -> Void)
}

extension NotificationTransport {
    /// The same send, awaited: a continuation resumed by the completion, no task of its own.
    /// Cancelling the caller does not withdraw the notification; every send ends by the
    /// transport's request deadline or its shutdown.
    public func send(_ notification: PushNotification) async -> TransportResult {
        await withCheckedContinuation { continuation in
            send(notification) { continuation.resume(returning: $0) }
        }
    }
}
