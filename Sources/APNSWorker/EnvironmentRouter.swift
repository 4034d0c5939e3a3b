import APNSModel

/// Sends each notification through the transport of its environment: a job may override its
/// bundle's environment (tokens of debug builds), so a bundle keeps a transport per environment.
public struct EnvironmentRouter: NotificationTransport {
    let transports: [APNSEnvironment: any NotificationTransport]

    public init(_ transports: [APNSEnvironment: any NotificationTransport]) {
        precondition(!transports.isEmpty, "a bundle needs at least one transport")
        self.transports = transports
    }

    public func send(_ notification: PushNotification, completion: @escaping @Sendable (TransportResult) -> Void) {
        guard let transport = transports[notification.environment] else { return completion(Self.notConfigured) }
        transport.send(notification, completion: completion)
    }

    /// Configuration decides which environments exist; a job asking for another one can never
    /// be sent, which is the job's own fault.
    static let notConfigured = TransportResult.http(HTTPAnswer(status: 400, reason: .unknown("EnvironmentNotConfigured")))
}

extension EnvironmentRouter: TransportStatusReporting {
    /// The connections of every environment's transport together (those that report them).
    public func connectionStates() -> [TransportConnectionState: Int] {
        var total = Dictionary(uniqueKeysWithValues: TransportConnectionState.allCases.map { ($0, 0) })
        for case let transport as any TransportStatusReporting in transports.values {
            total.merge(transport.connectionStates(), uniquingKeysWith: +)
        }
        return total
    }
}

extension EnvironmentRouter: InFlightWindowReporting {
    /// The largest window of the environments' transports: a bundle's jobs nearly all go to its
    /// own environment, and a sum would double the consumer's prefetch for an idle one.
    public var inFlightWindow: Int {
        transports.values.compactMap { ($0 as? any InFlightWindowReporting)?.inFlightWindow }.max() ?? 0
    }

    public func observeInFlightWindow(_ observer: @escaping @Sendable (Int) -> Void) {
        for case let transport as any InFlightWindowReporting in transports.values {
            transport.observeInFlightWindow { [self] _ in observer(inFlightWindow) }
        }
    }
}
