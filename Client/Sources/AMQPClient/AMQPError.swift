// AMQPError, the one error type of AMQPClient.
import Foundation

/// What went wrong (an extensible `code`), the broker's reply code and text for server
/// exceptions, librabbitmq's status string for library failures, and the queue / argument
/// involved when a declaration conflicts with what the broker holds.
public struct AMQPError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure. New codes can be added without breaking callers that switch on
    /// the ones they care about and treat the rest alike.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case invalidURL
            case connectionFailed
            case connectionLost
            case notConnected
            case closed
            case channelClosed
            case connectionClosedByServer
            case declarationConflict
            case publishReturned
            case publishNacked
            case consumerCancelled
            case invalidName
            case library
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }
        public var description: String { base.rawValue }

        /// An `amqp://` / `amqps://` URL that cannot be used.
        public static let invalidURL = Code(.invalidURL)
        /// No broker of the failover list accepted a connection (TCP, TLS, login).
        public static let connectionFailed = Code(.connectionFailed)
        /// The connection died (socket error, missed heartbeats) while the operation was in flight.
        public static let connectionLost = Code(.connectionLost)
        /// The operation needs a live connection and there is none right now (reconnecting).
        public static let notConnected = Code(.notConnected)
        /// The connection was closed by its owner (`close()`).
        public static let closed = Code(.closed)
        /// The broker closed the channel (channel exception: 404 NOT_FOUND, 406 PRECONDITION_FAILED…).
        public static let channelClosed = Code(.channelClosed)
        /// The broker closed the whole connection (connection exception, e.g. 320 CONNECTION_FORCED).
        public static let connectionClosedByServer = Code(.connectionClosedByServer)
        /// A declaration differs from the existing queue or exchange (406 PRECONDITION_FAILED);
        /// `queue`/`exchange` and `argument` name what differs.
        public static let declarationConflict = Code(.declarationConflict)
        /// A mandatory publish was unroutable and came back (`basic.return`).
        public static let publishReturned = Code(.publishReturned)
        /// The broker refused to take responsibility for a publish (`basic.nack`).
        public static let publishNacked = Code(.publishNacked)
        /// The broker cancelled the consumer (its queue was deleted, or the node holding it failed).
        public static let consumerCancelled = Code(.consumerCancelled)
        /// A queue or exchange name, routing key or consumer tag longer than AMQP's 255-byte short
        /// string: refused before it was sent (`ShortStringNames`); the connection is untouched.
        public static let invalidName = Code(.invalidName)
        /// librabbitmq failed (see `libraryStatus`).
        public static let library = Code(.library)
    }

    public var code: Code
    /// One human-readable line.
    public var message: String
    /// The AMQP reply code for server exceptions and returns (404, 406, 312, 320…).
    public var replyCode: UInt16?
    /// The broker's reply text, verbatim.
    public var replyText: String?
    /// librabbitmq's status string (`amqp_error_string2`) for library failures.
    public var libraryStatus: String?
    /// The queue involved, when there is one.
    public var queue: String?
    /// The exchange involved, when there is one.
    public var exchange: String?
    /// The argument that differs, for `declarationConflict` (e.g. `x-message-ttl`).
    public var argument: String?

    public init(
        _ code: Code, _ message: String, replyCode: UInt16? = nil, replyText: String? = nil,
        libraryStatus: String? = nil, queue: String? = nil, exchange: String? = nil, argument: String? = nil
    ) {
        self.code = code
        self.message = message
        self.replyCode = replyCode
        self.replyText = replyText
        self.libraryStatus = libraryStatus
        self.queue = queue
        self.exchange = exchange
        self.argument = argument
    }

    public var description: String {
        var text = "AMQPError.\(code): \(message)"
        if let replyCode, let replyText { text += " (\(replyCode) \(replyText))" }
        if let libraryStatus { text += " [librabbitmq: \(libraryStatus)]" }
        return text
    }

    /// Whether the caller may simply try again later (after a reconnect), as opposed to a
    /// failure that repeats until something is changed (bad URL, conflicting topology). 541
    /// INTERNAL_ERROR is the broker's own trouble, however it closed: RabbitMQ answers it to a
    /// quorum queue declared while its node's Raft cluster is not formed yet
    /// (`cluster_not_formed`: a node starting, or one too busy to answer in time).
    public var isTransient: Bool {
        if replyCode == 541 { return true }
        return switch code {
        case .connectionLost, .notConnected, .connectionFailed, .connectionClosedByServer, .publishNacked: true
        default: false
        }
    }
}

extension AMQPError {
    /// The argument a RabbitMQ `inequivalent arg 'x'` reply text names, if any.
    static func inequivalentArgument(in replyText: String) -> String? {
        guard let start = replyText.range(of: "inequivalent arg '") else { return nil }
        let rest = replyText[start.upperBound...]
        guard let end = rest.firstIndex(of: "'") else { return nil }
        return String(rest[..<end])
    }
}
