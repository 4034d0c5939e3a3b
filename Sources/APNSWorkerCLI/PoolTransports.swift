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

/// What `apns-worker run` puts in its connection pools (`TransportPools`): the transport of a
/// new pool, made for the first bundle that needed it; and the prefetch of a bundle whose pool
/// other bundles share (`PoolPrefetches`).
enum PoolTransports {
    /// The transport of a new pool. Every pool connects on its first notification: a bundle's
    /// other environment rarely gets one, and an idle credential keeps no connections to Apple.
    /// - Parameters:
    ///   - windowFloor: where the pool's in-flight window starts: a bundle's share.
    ///   - windowCeiling: the most it grows to (`[amqp] maxInFlight`; each consumer feeding the
    ///     pool takes at most its own share of it, `BundleInFlightBounds`).
    static func make(
        _ bundle: BundleConfiguration, environment: APNSEnvironment, key: TransportPoolKey, settings: WorkerSettings,
        tokens: TokenSources, windowFloor: Int, windowCeiling: Int, logger: Logger
    ) throws -> any NotificationTransport & Service {
        var transportLogger = logger
        transportLogger[metadataKey: "apns.pool"] = "\(key)"
        if bundle.transport == .binary {
            return try makeBinary(bundle, environment: environment, settings: settings, logger: transportLogger)
        }
        let authentication = try tokens.authentication(for: bundle, settings: settings)
        let (host, port) = bundle.endpoint(for: environment)
        var configuration = HTTP2TransportConfiguration(environment: environment, authentication: authentication, host: host, port: port)
        if let caFile = bundle.caFile { configuration.trustRoots = .caFile(caFile) }
        configuration.connections = bundle.connections
        configuration.connectOnFirstUse = true
        // A pool that carried nothing for five minutes closes (docs/decisions.md).
        configuration.poolIdleTimeout = HTTP2TransportConfiguration.defaultPoolIdleTimeout
        configuration.requestTimeout = settings.requestTimeout
        configuration.connectTimeout = settings.connectTimeout
        configuration.inFlightFloor = windowFloor
        configuration.inFlightCeiling = min(Int(UInt16.max), max(windowFloor, windowCeiling))
        // Unless the operator fixed `connections`, the window may open as many as its ceiling
        // needs at our stream cap (Apple allows about 1,000 streams each), up to 16.
        if !bundle.connectionsSet {
            let streams = configuration.maxConcurrentStreamsPerConnection
            configuration.maxConnections = max(bundle.connections, min(16, (configuration.inFlightCeiling + streams - 1) / streams))
        }
        return try HTTP2Transport(configuration: configuration, logger: transportLogger)
    }

    /// The legacy binary provider API: certificate authentication only (the loader refuses a
    /// binary bundle with token keys; this guards against a configuration built another way).
    static func makeBinary(
        _ bundle: BundleConfiguration, environment: APNSEnvironment, settings: WorkerSettings, logger: Logger
    ) throws -> BinaryTransport {
        guard case .certificate(let certFile, let keyFile) = bundle.auth else {
            throw ValidationError("[apns \"\(bundle.bundleID)\"] transport = binary needs certFile and keyFile")
        }
        let (host, port) = bundle.endpoint(for: environment)
        var configuration = BinaryTransportConfiguration(
            environment: environment, certFile: certFile, keyFile: keyFile, host: host, port: port)
        if let caFile = bundle.caFile { configuration.trustRoots = .caFile(caFile) }
        configuration.connections = bundle.connections
        configuration.connectOnFirstUse = true
        configuration.holdWindow = bundle.binaryHoldWindow
        configuration.connectTimeout = settings.connectTimeout
        configuration.maxQueueWait = settings.requestTimeout
        return try BinaryTransport(configuration: configuration, logger: logger)
    }
}

/// Each bundle's prefetch: its share of the in-flight budget, or less when bundles sharing its
/// pool would together take more jobs than the pool's streams carry (`PoolPrefetch`). Worked out
/// once per configuration read, not once per bundle: it reads every bundle's credential files,
/// and a configuration of n bundles makes n pipelines.
final class PoolPrefetches: Sendable {
    private let last = Mutex<(configuration: WorkerConfiguration, share: Int, prefetches: [String: Int])?>(nil)

    func prefetch(of bundle: BundleConfiguration, in configuration: WorkerConfiguration, share: Int, logger: Logger) -> Int {
        let cached = last.withLock { last in
            last.flatMap { $0.configuration == configuration && $0.share == share ? $0.prefetches : nil }
        }
        let prefetches = cached ?? Self.prefetches(in: configuration, share: share)
        if cached == nil { last.withLock { $0 = (configuration, share, prefetches) } }
        let prefetch = prefetches[bundle.bundleID] ?? share
        if prefetch < share {
            logger.info(
                "bundles sharing a connection pool split its streams: this consumer takes fewer jobs than the budget's share",
                metadata: ["apns.bundle": "\(bundle.bundleID)", "amqp.bundlePrefetch": "\(share)", "amqp.poolPrefetch": "\(prefetch)"])
        }
        return prefetch
    }

    private static func prefetches(in configuration: WorkerConfiguration, share: Int) -> [String: Int] {
        do {
            let members = try configuration.bundles.map { member in
                PoolPrefetch.Member(
                    bundleID: member.bundleID, key: try TransportPoolKey.reading(bundle: member, environment: member.environment),
                    connections: member.connections)
            }
            return PoolPrefetch.prefetches(
                members, share: share, streamsPerConnection: HTTP2TransportConfiguration.defaultMaxConcurrentStreamsPerConnection)
        } catch {
            // A credential that cannot be read fails the bundle's acquire with its own error.
            return [:]
        }
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

    /// How an HTTP/2 client of `bundle` authenticates: its key's shared token source, or its
    /// certificate (the transports and channel management make their clients alike).
    func authentication(for bundle: BundleConfiguration, settings: WorkerSettings) throws -> HTTP2TransportConfiguration.Authentication {
        switch bundle.auth {
        case .token(let teamID, let keyID, let keyFile):
            .token(try source(teamID: teamID, keyID: keyID, keyFile: keyFile, maximumAge: settings.providerTokenRefresh))
        case .certificate(let certFile, let keyFile):
            .certificate(certFile: certFile, keyFile: keyFile)
        }
    }
}
