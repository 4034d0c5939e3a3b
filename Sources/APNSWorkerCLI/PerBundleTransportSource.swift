import APNSConfig
import APNSModel
import APNSTransport
import APNSWorker
import ArgumentParser
import Crypto
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The transports of `apns-worker run`: every bundle unit gets its own, one per environment,
/// made when the unit starts (`acquire`) and drained and closed when it has stopped
/// (`release`). Each transport runs in a service group of its own, a child of this service's
/// `run()`, so one can be shut down gracefully while the others go on; at the worker's
/// shutdown they all drain after the worker's pipelines stopped (this service comes before the
/// worker in the group).
final class PerBundleTransportSource: TransportSource, Service {
    let settings: WorkerSettings
    let tokens: TokenSources
    let logger: Logger
    private let running = Mutex<[Key: ServiceGroup]>([:])
    private let commands: AsyncStream<Command>
    private let commandsContinuation: AsyncStream<Command>.Continuation

    private struct Key: Hashable {
        var bundleID: String
        var environment: APNSEnvironment
    }

    private enum Command {
        case run(ServiceGroup)
        case drain(ServiceGroup)
    }

    init(settings: WorkerSettings, tokens: TokenSources, logger: Logger) {
        self.settings = settings
        self.tokens = tokens
        self.logger = logger
        let (stream, continuation) = AsyncStream.makeStream(of: Command.self)
        commands = stream
        commandsContinuation = continuation
    }

    func acquire(bundle: BundleConfiguration, environment: APNSEnvironment) throws -> any NotificationTransport {
        let transport = try makeTransport(bundle, environment: environment)
        let group = ServiceGroup(configuration: .init(services: [.init(service: transport)], logger: logger))
        let replaced = running.withLock { $0.updateValue(group, forKey: Key(bundleID: bundle.bundleID, environment: environment)) }
        if let replaced { commandsContinuation.yield(.drain(replaced)) }
        commandsContinuation.yield(.run(group))
        return transport
    }

    func release(bundle: BundleConfiguration, environment: APNSEnvironment) {
        guard let group = running.withLock({ $0.removeValue(forKey: Key(bundleID: bundle.bundleID, environment: environment)) }) else { return }
        commandsContinuation.yield(.drain(group))
    }

    /// Runs every transport handed out until graceful shutdown; a released one drains and
    /// closes at once. A transport that fails fails the worker, as before units existed.
    func run() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            for await command in commands.cancelOnGracefulShutdown() {
                switch command {
                case .run(let transport): group.addTask { try await transport.run() }
                case .drain(let transport): group.addTask { await transport.triggerGracefulShutdown() }
                }
            }
        }
    }

    func makeTransport(_ bundle: BundleConfiguration, environment: APNSEnvironment) throws -> any NotificationTransport & Service {
        var transportLogger = logger
        transportLogger[metadataKey: "apns.bundle"] = "\(bundle.bundleID)"
        if bundle.transport == .binary {
            return try makeBinaryTransport(bundle, environment: environment, logger: transportLogger)
        }
        let authentication: HTTP2TransportConfiguration.Authentication
        switch bundle.auth {
        case .token(let teamID, let keyID, let keyFile):
            authentication = .token(try tokens.source(teamID: teamID, keyID: keyID, keyFile: keyFile, maximumAge: settings.providerTokenRefresh))
        case .certificate(let certFile, let keyFile):
            authentication = .certificate(certFile: certFile, keyFile: keyFile)
        }
        let (host, port) = bundle.endpoint(for: environment)
        var configuration = HTTP2TransportConfiguration(
            environment: environment, authentication: authentication, host: host, port: port)
        if let caFile = bundle.caFile { configuration.trustRoots = .caFile(caFile) }
        configuration.connections = bundle.connections
        configuration.connectOnFirstUse = environment != bundle.environment
        configuration.requestTimeout = settings.requestTimeout
        configuration.connectTimeout = settings.connectTimeout
        return try HTTP2Transport(configuration: configuration, logger: transportLogger)
    }

    /// The legacy binary provider API: certificate authentication only (the loader refuses a
    /// binary bundle with token keys; this guards against a configuration built another way).
    func makeBinaryTransport(_ bundle: BundleConfiguration, environment: APNSEnvironment, logger: Logger) throws -> BinaryTransport {
        guard case .certificate(let certFile, let keyFile) = bundle.auth else {
            throw ValidationError("[apns \"\(bundle.bundleID)\"] transport = binary needs certFile and keyFile")
        }
        let (host, port) = bundle.endpoint(for: environment)
        var configuration = BinaryTransportConfiguration(
            environment: environment, certFile: certFile, keyFile: keyFile, host: host, port: port)
        if let caFile = bundle.caFile { configuration.trustRoots = .caFile(caFile) }
        configuration.connections = bundle.connections
        configuration.connectOnFirstUse = environment != bundle.environment
        configuration.holdWindow = bundle.binaryHoldWindow
        configuration.connectTimeout = settings.connectTimeout
        configuration.maxQueueWait = settings.requestTimeout
        return try BinaryTransport(configuration: configuration, logger: logger)
    }
}

/// One provider-token source per team key, shared by every transport that signs with it, so
/// there is one JWT per key (contract §4: TooManyProviderTokenUpdates must never happen). A key
/// file whose content changed (a rotation in place) is a new key: a new source.
final class TokenSources: Sendable {
    private let sources = Mutex<[String: ProviderTokenSource]>([:])

    func source(teamID: String, keyID: String, keyFile: String, maximumAge: Duration) throws -> ProviderTokenSource {
        let data = try BoundedFile.read(keyFile, limit: BoundedFile.credentialLimit)
        let digest = SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
        let id = "\(teamID)/\(keyID)/\(digest)"
        if let existing = sources.withLock({ $0[id] }) { return existing }
        let source = ProviderTokenSource(
            teamID: teamID, keyID: keyID, key: try .init(pemRepresentation: String(decoding: data, as: UTF8.self)), maximumAge: maximumAge)
        return sources.withLock { sources in
            if let raced = sources[id] { return raced }
            sources[id] = source
            return source
        }
    }
}
