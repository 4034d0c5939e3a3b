import APNSModel
import Synchronization

/// Sends each notification through the transport of its environment: a job may override its
/// bundle's environment (tokens of debug builds), so a bundle keeps a transport per environment.
///
/// A notification the bundle's token key cannot sign for (`keyEnvironment`, `keyTopics`) is not
/// sent: it gets Apple's answer to it at once, 403 `BadEnvironmentKeyInToken` or 400
/// `TopicDisallowed`, which holds the bundle (contract §4: the fault is the configuration's, not
/// the job's; `docs/decisions.md`, "Apple's key rules").
public struct PerEnvironmentTransport: NotificationTransport {
    let transports: [APNSEnvironment: any NotificationTransport]
    let keyScope: TokenKeyScope

    public init(_ transports: [APNSEnvironment: any NotificationTransport], keyScope: TokenKeyScope = .unrestricted) {
        precondition(!transports.isEmpty, "a bundle needs at least one transport")
        self.transports = transports
        self.keyScope = keyScope
    }

    public func send(_ notification: PushNotification, completion: @escaping @Sendable (TransportResult) -> Void) {
        if let refusal = keyScope.refusal(environment: notification.environment, topic: notification.topic) {
            return completion(.http(refusal))
        }
        guard let transport = transports[notification.environment] else { return completion(Self.notConfigured) }
        transport.send(notification, completion: completion)
    }

    /// Configuration decides which environments exist; a job asking for another one can never
    /// be sent, which is the job's own fault.
    static let notConfigured = TransportResult.http(HTTPAnswer(status: 400, reason: .unknown("EnvironmentNotConfigured")))
}

extension PerEnvironmentTransport: TransportStatusReporting {
    /// The connections of every environment's transport together (those that report them).
    public func connectionStates() -> [TransportConnectionState: Int] {
        var total = Dictionary(uniqueKeysWithValues: TransportConnectionState.allCases.map { ($0, 0) })
        for case let transport as any TransportStatusReporting in transports.values {
            total.merge(transport.connectionStates(), uniquingKeysWith: +)
        }
        return total
    }
}

extension PerEnvironmentTransport: InFlightWindowReporting {
    /// The largest window of the environments' transports: a bundle's jobs nearly all go to its
    /// own environment, and a sum would double the consumer's prefetch for an idle one.
    public var inFlightWindow: Int {
        transports.values.compactMap { ($0 as? any InFlightWindowReporting)?.inFlightWindow }.max() ?? 0
    }

    /// The largest of this bundle's shares of its environments' windows.
    public func observeInFlightWindow(_ observer: @escaping @Sendable (Int) -> Bool) {
        let shares = Mutex<[APNSEnvironment: Int]>([:])
        for (environment, transport) in transports {
            guard let transport = transport as? any InFlightWindowReporting else { continue }
            transport.observeInFlightWindow { share in
                let largest = shares.withLock { shares in
                    shares[environment] = share
                    return shares.values.max() ?? share
                }
                return observer(largest)
            }
        }
    }
}
