/// What a transport reports about its connections, for the admin page, `/ready` and the
/// `apns_transport_connections` gauge. Shared by both transports so the operator surface does not
/// need to know which protocol a bundle speaks.
public enum TransportConnectionState: String, Sendable, Hashable, CaseIterable, Codable {
    /// Not connected because no notification has needed it yet: the transport of a bundle's
    /// other environment connects on first use.
    case idle
    /// TCP connect or TLS handshake under way.
    case connecting
    /// Up and able to carry notifications.
    case ready
    /// Lost or failed; waiting for the reconnect backoff to pass.
    case backingOff = "backing_off"
    /// Closed for good (shutdown).
    case closed
}

/// A transport that can say how many of its connections are in each state.
public protocol TransportStatusReporting: Sendable {
    /// A count for every state, zero included, so gauges and tables always have the same rows.
    func connectionStates() -> [TransportConnectionState: Int]
}

/// A transport that sizes what it keeps in flight to the round trip it measures
/// (`InFlightWindow`; docs/decisions.md, "The in-flight window"): whoever feeds it (a bundle's
/// consumer) keeps its prefetch at the window.
public protocol InFlightWindowReporting: Sendable {
    /// Notifications the transport wants in flight now.
    var inFlightWindow: Int { get }
    /// `observer` is told its share of each new window (the window divided evenly among the
    /// observers: the consumers of the bundles that share a pool), on the thread that measured it
    /// (an event loop): it must be quick and never block. It returns false once nobody listens
    /// any more (its consumer is gone, a bundle removed while running) and is then forgotten.
    func observeInFlightWindow(_ observer: @escaping @Sendable (Int) -> Bool)
}
