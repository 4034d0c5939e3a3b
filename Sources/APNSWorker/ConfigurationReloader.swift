import AMQPClient
import APNSConfig
import Foundation
import Logging
import ServiceClock
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Changes while running (contract §3): re-reads the configuration on SIGHUP, and by itself
/// when the configuration file or a file it names changes, and applies what changed to the
/// worker (`WorkerService.apply`).
///
/// Changes are noticed by polling the files' content digests every `pollInterval` (paths
/// followed afresh each time, so a Kubernetes `..data` symlink swap is seen, and a file
/// rewritten with the same bytes is not a change). Every read validates the whole
/// configuration as at start-up; one that cannot be used changes nothing and logs the start-up
/// error line, once per change (a poll re-reads only when something changed again). A change
/// to a restart-only section is logged and not applied; every applied change is one log line.
/// What is built from the configuration beside the bundle units (the feedback pollers, the
/// channel management clients) follows each applied change (`ConfigurationFollower`), before
/// that line. A change the broker could not take (down, or a node not ready: the topology of a
/// new bundle cannot be declared, a new unit's stored pause cannot be read) waits for it: said
/// once, read again at every poll until it is applied, so a reload during an outage is not lost
/// until the next edit.
public final class ConfigurationReloader<Broker: WorkerBroker>: Service, Sendable {
    public enum Trigger: String, Sendable {
        case signal = "SIGHUP"
        case fileChange = "file change"
        case brokerWait = "retry: the broker was unavailable"
    }

    let path: String
    let environment: [String: String]
    let worker: WorkerService<Broker>
    let followers: [any ConfigurationFollower]
    let pollInterval: Duration
    /// The poll interval's time.
    let clock: any ConsumerClock
    let logger: Logger
    private let state: Mutex<State>

    private struct State {
        var inForce: LoadedConfiguration
        /// The content digests of the watched files as last seen by a poll or a read.
        var seen: [String: String] = [:]
        /// Files named by the last configuration read, usable or not (a missing key file the new
        /// configuration names is watched until it appears).
        var lastNamed: [String] = []
        /// A change the broker could not take: read and applied again at the next poll.
        var waitingForBroker = false
    }

    public init(
        path: String, environment: [String: String] = ProcessInfo.processInfo.environment, inForce: LoadedConfiguration,
        worker: WorkerService<Broker>, followers: [any ConfigurationFollower] = [], pollInterval: Duration = .seconds(2), logger: Logger,
        clock: any ConsumerClock = SystemConsumerClock()
    ) {
        self.clock = clock
        self.path = path
        self.environment = environment
        self.worker = worker
        self.followers = followers
        self.pollInterval = pollInterval
        self.logger = logger
        self.state = Mutex(State(inForce: inForce))
        let seen = fingerprint()
        state.withLock { $0.seen = seen }
        worker.configurationInForce = ConfigurationInForce(inForce)
    }

    /// The configuration in force and when it was read.
    public var inForce: LoadedConfiguration { state.withLock { $0.inForce } }

    public func run() async throws {
        let (triggers, trigger) = AsyncStream.makeStream(of: Trigger.self, bufferingPolicy: .bufferingNewest(1))
        let signals = await UnixSignalsSequence(trapping: .sighup)
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await _ in signals.cancelOnGracefulShutdown() { trigger.yield(.signal) }
            }
            group.addTask {
                await Periodic.run(every: self.pollInterval, on: self.clock, start: .afterInterval) {
                    if self.changedSinceSeen() {
                        trigger.yield(.fileChange)
                    } else if self.state.withLock({ $0.waitingForBroker }) {
                        trigger.yield(.brokerWait)
                    }
                }
            }
            for await reason in triggers.cancelOnGracefulShutdown() {
                await reload(reason)
            }
            group.cancelAll()
        }
    }

    /// The watched files: the configuration file and every file named by the configuration in
    /// force or by the last one read.
    private func watchedFiles() -> [String] {
        let (inForce, lastNamed) = state.withLock { ($0.inForce, $0.lastNamed) }
        var seen = Set<String>()
        return ([path] + LoadedConfiguration.namedFiles(inForce.configuration) + lastNamed).filter { seen.insert($0).inserted }
    }

    private func fingerprint() -> [String: String] {
        Dictionary(
            watchedFiles().map { ($0, BoundedFile.digest($0, limit: $0 == path ? BoundedFile.configurationLimit : BoundedFile.credentialLimit)) },
            uniquingKeysWith: { first, _ in first })
    }

    /// Whether a watched file's content changed since the last poll or read (and notes it).
    private func changedSinceSeen() -> Bool {
        let now = fingerprint()
        return state.withLock { state in
            guard state.seen != now else { return false }
            state.seen = now
            return true
        }
    }

    /// Reads the configuration and applies what changed; a configuration that cannot be used
    /// changes nothing.
    public func reload(_ trigger: Trigger) async {
        let before = fingerprint()
        state.withLock { $0.seen = before }
        var metadata: Logger.Metadata = ["config.trigger": "\(trigger.rawValue)", "config.path": "\(path)"]
        // Every read that does not end waiting for the broker ends a wait (applied, nothing to
        // apply, or a file that can no longer be used: its fix is a change of its own).
        var waits = false
        defer { if !waits { state.withLock { $0.waitingForBroker = false } } }
        let next: LoadedConfiguration
        do {
            next = try LoadedConfiguration.read(path: path, environment: environment)
        } catch {
            // The start-up line itself; the files it names are watched so that fixing one of
            // them is noticed too.
            let named = (try? ConfigurationLoader.load(path: path, environment: environment, credentials: .skipFiles))
                .map(LoadedConfiguration.namedFiles) ?? []
            state.withLock { $0.lastNamed = named }
            metadata["config.reload"] = "not applied: the configuration in force stays"
            logger.error("\(error)", metadata: metadata)
            return
        }
        let current = inForce
        state.withLock { $0.lastNamed = LoadedConfiguration.namedFiles(next.configuration) }
        let change = current.change(to: next)
        if change.isEmpty {
            logger.info("configuration read again: nothing changed", metadata: metadata)
            return
        }
        if !change.restartOnly.isEmpty, trigger != .brokerWait {
            metadata["config.sections"] = "\(change.restartOnly.joined(separator: ", "))"
            logger.warning("configuration change needs a restart: not applied", metadata: metadata)
            metadata["config.sections"] = nil
        }
        var applied = current.applying(next)
        guard change.needsApplying else {
            keep(applied, pendingRestart: change.restartOnly)
            return
        }
        let failures: [String: any Error]
        do {
            failures = try await worker.apply(change, configuration: applied.configuration)
        } catch {
            metadata["error"] = "\(error)"
            if Self.isBrokerOutage(error) {
                waits = true
                waitForBroker(metadata: metadata)
            } else {
                logger.error("configuration change not applied: the configuration in force stays", metadata: metadata)
            }
            return
        }
        applied = applied.removingBundles(Set(failures.keys))
        for follower in followers { await follower.follow(applied) }
        // In force before it is told: whoever reads the line and then asks `/api/status` sees it.
        keep(applied, pendingRestart: change.restartOnly)
        metadata["config.changes"] = "\(change.summary.joined(separator: "; "))"
        logger.notice("configuration change applied", metadata: metadata)
        let waiting = failures.filter { Self.isBrokerOutage($0.value) }
        for (bundleID, error) in failures.sorted(by: { $0.key < $1.key }) where waiting[bundleID] == nil {
            logger.error(
                "bundle not started: its transports could not be made; it is read again at the next change",
                metadata: ["apns.bundle": "\(bundleID)", "error": "\(error)"])
        }
        if let (bundleID, error) = waiting.min(by: { $0.key < $1.key }) {
            metadata["config.changes"] = nil
            metadata["apns.bundles"] = "\(waiting.keys.sorted().joined(separator: ", "))"
            metadata["apns.bundle"] = "\(bundleID)"
            metadata["error"] = "\(error)"
            waits = true
            waitForBroker(metadata: metadata)
        }
    }

    /// A failure the broker's return ends: it was unreachable, or refused for a while.
    static func isBrokerOutage(_ error: any Error) -> Bool {
        (error as? AMQPError)?.isTransient == true
    }

    /// Reads the change again at every poll until it is applied; said once, not at every poll.
    private func waitForBroker(metadata: Logger.Metadata) {
        let first = state.withLock { state in
            defer { state.waitingForBroker = true }
            return !state.waitingForBroker
        }
        var metadata = metadata
        metadata["config.reload"] = "tried again every \(pollInterval) until it is applied"
        if first {
            logger.error("configuration change waits for the broker", metadata: metadata)
        } else {
            logger.debug("configuration change still waits for the broker", metadata: metadata)
        }
    }

    private func keep(_ applied: LoadedConfiguration, pendingRestart: [String]) {
        state.withLock { $0.inForce = applied }
        worker.configurationInForce = ConfigurationInForce(applied, pendingRestart: pendingRestart)
    }
}
