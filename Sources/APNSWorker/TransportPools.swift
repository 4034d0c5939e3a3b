/// The worker's connection pools to APNs, one per pool key (credential, environment, endpoint),
/// shared by every bundle whose key is equal (docs/decisions.md, "Connection pools").
/// A ServiceLifecycle `Service`: pools appear and go at run time (a bundle's unit acquires its
/// pools when it starts and releases them when it stops), so `run()` runs each pool in a task
/// group of its own rather than the service group owning a fixed list of transports.
import APNSConfig
import APNSModel
import Logging
import ServiceLifecycle
import Synchronization

public final class TransportPools: Service, Sendable {
    /// Makes the transport of a new pool; `bundle` is the first bundle that needed it (its
    /// `connections`, `caFile` and timeouts are the pool's).
    public typealias Factory =
        @Sendable (_ key: TransportPoolKey, _ bundle: BundleConfiguration, _ environment: APNSEnvironment) throws
        -> any NotificationTransport & Service
    /// The pool key of a bundle for an environment (`TransportPoolKey.reading` in production).
    public typealias KeyReader = @Sendable (_ bundle: BundleConfiguration, _ environment: APNSEnvironment) throws -> TransportPoolKey

    public enum PoolsError: Error, CustomStringConvertible {
        /// The pools have begun shutting down (or finished): no new pool would ever run.
        case stopped

        public var description: String { "the transport pools have stopped: no new connection pool is opened" }
    }

    private struct Pool {
        let key: TransportPoolKey
        let transport: any NotificationTransport & Service
        /// Runs the transport; its graceful shutdown drains this pool alone.
        let group: ServiceGroup
        /// Acquisitions not released yet, by bundle ID.
        var users: [String: Int] = [:]
        var references: Int { users.values.reduce(0, +) }
    }

    /// One bundle configuration's use of one environment: what `release` names.
    private struct Use: Hashable {
        let bundle: BundleConfiguration
        let environment: APNSEnvironment
    }

    private enum Command: Sendable {
        case run(ServiceGroup, name: String)
        case drain(ServiceGroup, name: String)
    }

    private struct State {
        var pools: [TransportPoolKey: Pool] = [:]
        /// The keys each use acquired, oldest first: a file may change between `acquire` and
        /// `release`, so the key is the one computed when the use began, not recomputed.
        var uses: [Use: [TransportPoolKey]] = [:]
        var stopped = false
    }

    private let state = Mutex(State())
    private let commands: AsyncStream<Command>
    private let commandSink: AsyncStream<Command>.Continuation
    private let factory: Factory
    private let poolKey: KeyReader
    private let logger: Logger

    public init(logger: Logger, poolKey: @escaping KeyReader = TransportPoolKey.reading, factory: @escaping Factory) {
        (commands, commandSink) = AsyncStream.makeStream(of: Command.self)
        self.factory = factory
        self.poolKey = poolKey
        self.logger = logger
    }

    /// The transport `bundle` sends through to `environment`: the pool of its key, made (and
    /// started, once `run()` runs) if no bundle uses it yet. Each call is one use until
    /// `release(bundle:environment:)`. Safe from any thread, at any time before shutdown.
    /// - Throws: when a credential file cannot be read, the transport cannot be made (its TLS
    ///   material), or the pools have stopped.
    public func acquire(bundle: BundleConfiguration, environment: APNSEnvironment) throws -> any NotificationTransport {
        let key = try poolKey(bundle, environment)
        let (transport, created) = try state.withLock { state throws -> (any NotificationTransport, Bool) in
            guard !state.stopped else { throw PoolsError.stopped }
            var created = false
            if state.pools[key] == nil {
                let transport = try factory(key, bundle, environment)
                let group = ServiceGroup(services: [transport], logger: logger)
                state.pools[key] = Pool(key: key, transport: transport, group: group)
                commandSink.yield(.run(group, name: key.description))
                created = true
            }
            state.pools[key]!.users[bundle.bundleID, default: 0] += 1
            state.uses[Use(bundle: bundle, environment: environment), default: []].append(key)
            return (state.pools[key]!.transport, created)
        }
        // One line per pool; a bundle joining one is a debug line (a thousand bundles of one
        // team would otherwise be a thousand lines at start-up).
        logger.log(
            level: created ? .info : .debug, created ? "connection pool made; it connects on its first job" : "bundle joins a shared connection pool",
            metadata: ["apns.bundle": "\(bundle.bundleID)", "apns.pool": "\(key)"])
        return transport
    }

    /// Ends one use of `acquire(bundle:environment:)` with the same arguments (its oldest). A
    /// pool nobody uses any more takes no new notifications, finishes those it carries (each
    /// bounded by its request deadline) and closes. Releasing what was never acquired does nothing.
    public func release(bundle: BundleConfiguration, environment: APNSEnvironment) {
        let use = Use(bundle: bundle, environment: environment)
        let closed = state.withLock { state -> TransportPoolKey? in
            guard var keys = state.uses[use], !keys.isEmpty else { return nil }
            let key = keys.removeFirst()
            state.uses[use] = keys.isEmpty ? nil : keys
            guard var pool = state.pools[key] else { return nil }
            pool.users[bundle.bundleID, default: 0] -= 1
            if pool.users[bundle.bundleID]! <= 0 { pool.users[bundle.bundleID] = nil }
            guard pool.references == 0 else {
                state.pools[key] = pool
                return nil
            }
            state.pools[key] = nil
            commandSink.yield(.drain(pool.group, name: key.description))
            return key
        }
        if let closed {
            logger.info("connection pool no longer used: draining", metadata: ["apns.bundle": "\(bundle.bundleID)", "apns.pool": "\(closed)"])
        }
    }

    /// Every pool now in use, by name.
    public func reports() -> [WorkerStatus.Pool] {
        let pools = state.withLock { Array($0.pools.values) }
        return pools.map { pool in
            let states = (pool.transport as? any TransportStatusReporting)?.connectionStates() ?? [:]
            return WorkerStatus.Pool(
                name: pool.key.description, environment: pool.key.environment.rawValue, bundles: pool.users.keys.sorted(),
                connections: Dictionary(uniqueKeysWithValues: states.map { ($0.key.rawValue, $0.value) }))
        }.sorted { $0.name < $1.name }
    }

    /// Runs every pool, those acquired before and those acquired while it runs, until graceful
    /// shutdown; then each pool drains (graceful shutdown reaches the pools' own groups) and
    /// `run()` returns when the last has closed.
    public func run() async throws {
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await command in commands {
                    start(command, in: &group)
                }
            }
        } onGracefulShutdown: { [self] in
            // No pool made from now on could run: refuse them. Those already asked for are
            // still run (the stream ends after them): they see the shutdown at once and close.
            state.withLock { $0.stopped = true }
            commandSink.finish()
        }
        logger.info("connection pools closed")
    }

    private func start(_ command: Command, in group: inout DiscardingTaskGroup) {
        switch command {
        case .run(let pool, let name):
            group.addTask { [logger] in
                do {
                    try await pool.run()
                } catch {
                    logger.error("connection pool failed", metadata: ["apns.pool": "\(name)", "error": "\(error)"])
                }
            }
        case .drain(let pool, _):
            group.addTask { await pool.triggerGracefulShutdown() }
        }
    }
}

/// The pools are the worker's transport source: a bundle unit that starts acquires its pools,
/// one that stops releases them, so a re-credentialed bundle moves to the new key's pool and the
/// old pool drains once no bundle uses it.
extension TransportPools: TransportSource {}
