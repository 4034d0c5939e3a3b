/// Per-connection state of the simulator's HTTP/2 listener: the client certificate, the provider
/// token history, and the stream admission behind the GOAWAY and drop faults.
import Foundation
import Synchronization

/// What one TLS connection remembers: its client certificate, its provider token, how many
/// streams it opened, and whether a GOAWAY or a drop was decided for it. Shared by the
/// connection's handlers, which all run on its event loop; the lock only makes that provable.
final class ConnectionState: Sendable {
    enum TokenAdoption {
        /// The token is now the connection's; `first` when it had none before.
        case adopted(first: Bool)
        case tooSoon
        /// A token of another team than the connection's first: Apple takes one team per connection.
        case otherTeam
    }

    /// What to do with a stream the peer just opened.
    enum StreamAdmission: Equatable {
        case process(ordinal: Int)
        /// Process it and send GOAWAY naming it as the last stream.
        case processAndGoAway(ordinal: Int)
        /// A GOAWAY named an earlier stream as the last: refuse it.
        case refuse
    }

    private struct State {
        var hasClientCertificate: Bool?
        var authorization: String?
        var credential: RequestCredential?
        /// The team of the connection's first token; it never changes.
        var team: String?
        var tokenSince: Date?
        var streamsOpened = 0
        var activeStreams = 0
        /// Processed streams whose request has not been read to its end yet.
        var unreadRequests = 0
        var goawayDecided = false
        /// The GOAWAY's last stream, until the frame is sent (see `requestRead`).
        var pendingGoAway: Int?
        var dropped = false
    }

    private let state = Mutex(State())

    /// nil until the first request asked the TLS handler.
    var hasClientCertificate: Bool? {
        get { state.withLock { $0.hasClientCertificate } }
        set { state.withLock { $0.hasClientCertificate = newValue } }
    }

    func knownCredential(authorization: String) -> RequestCredential? {
        state.withLock { $0.authorization == authorization ? $0.credential : nil }
    }

    func adoptToken(authorization: String, credential: RequestCredential, now: Date, minimumInterval: Duration) -> TokenAdoption {
        state.withLock { s in
            let first = s.authorization == nil
            if case .token(_, _, let team, _) = credential {
                if let bound = s.team, bound != team { return .otherTeam }
                s.team = team
            }
            if let since = s.tokenSince, now.timeIntervalSince(since) < Double(minimumInterval.components.seconds) {
                return .tooSoon
            }
            s.authorization = authorization
            s.credential = credential
            s.tokenSince = now
            return .adopted(first: first)
        }
    }

    /// `streamID` is the stream's id, named in the GOAWAY when this stream is the last.
    func streamOpened(streamID: Int, goawayAfter: Int?) -> StreamAdmission {
        state.withLock { s in
            if s.goawayDecided { return .refuse }
            s.streamsOpened += 1
            s.activeStreams += 1
            s.unreadRequests += 1
            if let goawayAfter, s.streamsOpened >= goawayAfter {
                s.goawayDecided = true
                s.pendingGoAway = streamID
                return .processAndGoAway(ordinal: s.streamsOpened)
            }
            return .process(ordinal: s.streamsOpened)
        }
    }

    /// A processed stream's request was read to its end (or the stream ended before it was).
    /// Returns the last stream id for the GOAWAY once every stream up to the last has been read:
    /// the frame goes out only then. (Sent at once, it made swift-nio-http2's server lose
    /// request DATA that arrived after it on streams below the last under load, so the
    /// transport's GOAWAY test hung on streams neither side could finish.)
    func requestRead() -> Int? {
        state.withLock { s in
            s.unreadRequests -= 1
            guard s.unreadRequests == 0, let last = s.pendingGoAway else { return nil }
            s.pendingGoAway = nil
            return last
        }
    }

    /// A processed stream closed; true when the connection should now close (GOAWAY sent and
    /// nothing left to answer).
    func streamClosed() -> Bool {
        state.withLock { s in
            s.activeStreams -= 1
            return s.goawayDecided && s.activeStreams == 0
        }
    }

    /// True the first time only.
    func markDropped() -> Bool {
        state.withLock { s in
            defer { s.dropped = true }
            return !s.dropped
        }
    }
}
