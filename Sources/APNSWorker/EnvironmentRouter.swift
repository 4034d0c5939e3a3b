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
