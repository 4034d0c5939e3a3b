/// Helpers for the HTTP/2 transport's integration tests: a simulator and a transport wired to it
/// over TLS on loopback, run for the length of one test, and notifications to send through it.
import APNSModel
import APNSSimulator
import APNSTransport
import Foundation
import Logging
import ServiceClock
import Synchronization

enum HTTP2Integration {
    static let bundle = SimulatorTestEnvironment.bundle
    static var credentials: GeneratedCredentials { SimulatorTestEnvironment.credentials }

    static var logger: Logger {
        var logger = Logger(label: "http2-integration-tests")
        logger.logLevel = .warning
        return logger
    }

    /// A token source for the run's credentials; `now` lets a test age the tokens it signs.
    static func tokenSource(now: @escaping @Sendable () -> Date = { Date() }) -> ProviderTokenSource {
        ProviderTokenSource(teamID: credentials.teamID, keyID: credentials.keyID, key: credentials.tokenPrivateKey, now: now)
    }

    /// A transport configuration for the simulator on `port`, trusting its CA (token auth by default).
    static func configuration(
        port: Int, authentication: HTTP2TransportConfiguration.Authentication? = nil
    ) -> HTTP2TransportConfiguration {
        var configuration = HTTP2TransportConfiguration(
            environment: .production, authentication: authentication ?? .token(tokenSource()), host: "127.0.0.1", port: port)
        configuration.trustRoots = .caFile(credentials.caCertificatePath)
        return configuration
    }

    /// Starts a simulator and a transport trusting its CA, runs the transport as a service in a
    /// task group, calls `body`, then cancels the group and shuts the simulator down. `clock`
    /// is the transport's (its idle checks').
    static func withTransport<T: Sendable>(
        authentication: HTTP2TransportConfiguration.Authentication? = nil,
        simulator adjustSimulator: (inout SimulatorConfiguration) -> Void = { _ in },
        transport adjustTransport: (inout HTTP2TransportConfiguration) -> Void = { _ in },
        clock: any ConsumerClock = SystemConsumerClock(),
        _ body: (APNSSimulator, HTTP2Transport) async throws -> T
    ) async throws -> T {
        try await SimulatorTestEnvironment.withOwnEventLoop { group in
            let simulator = try await APNSSimulator.start(
                SimulatorTestEnvironment.configuration(adjustSimulator), logger: logger, eventLoopGroup: group)
            return try await withRunningService(
                simulator,
                make: {
                    var configuration = configuration(port: simulator.port, authentication: authentication)
                    configuration.reconnectInitialDelay = .milliseconds(10)
                    // Deadlines no test here is about: at the start of a full run every suite
                    // starts at once and this process stalled for over a minute (load 36), past
                    // the 10 s defaults. Tests of a deadline set their own.
                    configuration.requestTimeout = .seconds(120)
                    configuration.connectTimeout = .seconds(120)
                    adjustTransport(&configuration)
                    return try HTTP2Transport(configuration: configuration, logger: logger, eventLoopGroup: group, clock: clock)
                },
                run: { try await $0.run() },
                { try await body(simulator, $0) })
        }
    }

    /// A notification for `token` (a fresh random one by default).
    static func notification(
        token: String = SimulatorTestEnvironment.deviceToken(), payload: String = #"{"aps":{"alert":"hi"}}"#
    ) -> PushNotification {
        PushNotification(
            id: UUID(), token: DeviceToken(hex: token)!, topic: bundle, pushType: .alert, priority: 10, expiration: nil,
            collapseID: nil, payload: Array(payload.utf8), environment: .production)
    }

    /// Sends all of `notifications` at once; results in the same order.
    static func sendAll(
        _ notifications: [PushNotification], through transport: HTTP2Transport
    ) async -> [TransportResult] {
        await withTaskGroup(of: (Int, TransportResult).self) { group in
            for (index, notification) in notifications.enumerated() {
                group.addTask { (index, await transport.send(notification)) }
            }
            var results = [TransportResult?](repeating: nil, count: notifications.count)
            for await (index, result) in group { results[index] = result }
            return results.map { $0! }
        }
    }
}

extension TransportResult {
    /// The HTTP answer, if APNs gave one.
    var answer: HTTPAnswer? {
        if case .http(let answer) = self { return answer }
        return nil
    }

    var isAccepted: Bool { answer?.status == 200 }
}

/// A clock for `ProviderTokenSource` whose first `staleReadings` readings lie `offset` seconds off
/// the wall clock, so the first token it signs is already old; later readings are the wall clock.
final class HTTP2IntegrationClock: Sendable {
    private let staleReadingsLeft: Mutex<Int>
    private let offset: TimeInterval

    init(staleReadings: Int, offset: TimeInterval) {
        self.staleReadingsLeft = Mutex(staleReadings)
        self.offset = offset
    }

    func now() -> Date {
        let stale = staleReadingsLeft.withLock { left -> Bool in
            guard left > 0 else { return false }
            left -= 1
            return true
        }
        return stale ? Date().addingTimeInterval(offset) : Date()
    }
}

/// Makes a transport for `simulator`, runs its service loop beside `body`, then cancels the loop
/// and shuts the simulator down, whatever `make` or `body` did. Both transports' integration
/// tests run this way.
func withRunningService<Transport: Sendable, T: Sendable>(
    _ simulator: APNSSimulator, make: () throws -> Transport, run: @escaping @Sendable (Transport) async throws -> Void,
    _ body: (Transport) async throws -> T
) async throws -> T {
    do {
        let transport = try make()
        let result = try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await run(transport) }
            do {
                let result = try await body(transport)
                group.cancelAll()
                try await group.waitForAll()
                return result
            } catch {
                group.cancelAll()
                throw error
            }
        }
        try await simulator.shutdown()
        return result
    } catch {
        try? await simulator.shutdown()
        throw error
    }
}
