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

    public var description: String {
        switch self {
        case .connectionLost(let why): return "connection lost: \(why)"
        case .streamReset(let code): return "stream reset (HTTP/2 error \(code))"
        case .timeout: return "request deadline passed"
        case .goaway: return "GOAWAY before the answer"
        case .connectFailed(let why): return "connect failed: \(why)"
        case .shutdown: return "transport shut down"
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
        }
    }
}

/// A transport: sends one notification and reports what became of it. Implementations own their
/// connections; `send` may be called concurrently and must never throw away a notification
/// silently: every call returns a result.
public protocol NotificationTransport: Sendable {
    func send(_ notification: PushNotification) async -> TransportResult
    /// The same without a task: `completion` runs exactly once with the result, on whatever
    /// thread the transport learns it on (the connection's event loop for HTTP/2), so it must
    /// be quick and never block. The worker's hot path uses this: a Swift task and a
    /// continuation per notification, and the thread hops they cost, were a large share of
    /// its CPU.
    func send(_ notification: PushNotification, completion: @escaping @Sendable (TransportResult) -> Void)
}

extension NotificationTransport {
    /// For transports with no cheaper way: one task per notification.
    public func send(_ notification: PushNotification, completion: @escaping @Sendable (TransportResult) -> Void) {
        Task { completion(await send(notification)) }
    }
}
