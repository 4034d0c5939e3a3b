/// The legacy feedback service pollers of the configuration in force, one per binary bundle that
/// polls (`FeedbackPoller`), following changes while running (contract §3): a removed bundle's
/// poller stops, an added bundle's starts, and a bundle whose certificate, key, CA file, endpoint
/// or interval changed (a file's content included) gets a new poller on a new client. A poll
/// under way finishes before its poller stops: the service forgets what it served.
import AMQPClient
import APNSConfig
import APNSModel
import APNSTransport
import Logging
import ServiceClock
import ServiceLifecycle
import Synchronization

/// Told of the configuration in force after every change the worker applied, for what is built
/// from the configuration beside the bundle units (feedback pollers, channel management clients).
public protocol ConfigurationFollower: Sendable {
    /// `inForce` holds the bundles now running: one whose unit could not be made is not in it.
    func follow(_ inForce: LoadedConfiguration) async
}

/// What one bundle's poller is made from: two equal specs poll the same service the same way.
struct FeedbackPollerSpec: Sendable, Hashable {
    var bundleID: String
    var client: FeedbackClientSpec
    var interval: Duration

    /// The client's settings and the content digests of its certificate, key and CA files (a
    /// file rotated in place is a new client).
    struct FeedbackClientSpec: Sendable, Hashable {
        var host: String
        var port: Int
        var certFile: String
        var keyFile: String
        var caFile: String?
        var digests: [String?]
    }

    /// Nil for a bundle that does not poll (http2, `feedbackInterval = 0`, no certificate).
    init?(_ bundle: BundleConfiguration, fileDigests: [String: String]) {
        guard let (host, port) = bundle.feedbackEndpoint(for: bundle.environment),
            case .certificate(let certFile, let keyFile) = bundle.auth
        else { return nil }
        bundleID = bundle.bundleID
        interval = bundle.feedbackInterval
        client = FeedbackClientSpec(
            host: host, port: port, certFile: certFile, keyFile: keyFile, caFile: bundle.caFile,
            digests: [fileDigests[certFile], fileDigests[keyFile], bundle.caFile.flatMap { fileDigests[$0] }])
    }

    var clientConfiguration: BinaryFeedbackClient.Configuration {
        .init(host: client.host, port: client.port, certFile: client.certFile, keyFile: client.keyFile, caFile: client.caFile)
    }

    static func wanted(_ loaded: LoadedConfiguration) -> [FeedbackPollerSpec] {
        loaded.configuration.bundles.compactMap { FeedbackPollerSpec($0, fileDigests: loaded.fileDigests) }
    }
}

/// How the running pollers become the wanted ones, by bundle ID.
struct FeedbackPollerPlan: Sendable, Equatable {
    var started: [FeedbackPollerSpec] = []
    var stopped: [String] = []
    var replaced: [FeedbackPollerSpec] = []

    init(running: [String: FeedbackPollerSpec], wanted: [FeedbackPollerSpec]) {
        let wantedIDs = Set(wanted.map(\.bundleID))
        stopped = running.keys.filter { !wantedIDs.contains($0) }.sorted()
        for spec in wanted {
            switch running[spec.bundleID] {
            case nil: started.append(spec)
            case let current? where current != spec: replaced.append(spec)
            default: break
            }
        }
    }

    var isEmpty: Bool { started.isEmpty && stopped.isEmpty && replaced.isEmpty }
}

/// The pollers run in `run()`'s task group, fed by a stream of pollers to start, as the worker
/// runs its bundle units (`WorkerService`); each is stopped alone by its own `StopSignal`, and
/// all of them end with the service (graceful shutdown or cancellation).
public final class FeedbackPollers<Publisher: ConfirmedPublishing>: Service, ConfigurationFollower {
    /// Makes a bundle's poller (on a `BinaryFeedbackClient` in production).
    typealias PollerMaker = @Sendable (FeedbackPollerSpec) throws -> FeedbackPoller<Publisher>

    private let makePoller: PollerMaker
    private let logger: Logger
    private let state: Mutex<State>
    private let starts: (stream: AsyncStream<RunningPoller>, continuation: AsyncStream<RunningPoller>.Continuation)

    private struct State {
        var pollers: [String: RunningPoller] = [:]
        /// False once `run()` ended: a poller made later is never run.
        var accepting = true
    }

    /// - Throws: when a bundle's certificate, key or CA file cannot be loaded (at start-up, as
    ///   before any poll).
    public convenience init(_ loaded: LoadedConfiguration, broker: Publisher, observer: (any JobEndObserver)?, logger: Logger) throws {
        try self.init(loaded, logger: logger) { spec in
            let client = try BinaryFeedbackClient(configuration: spec.clientConfiguration, logger: logger)
            var poller = FeedbackPoller(bundleID: spec.bundleID, interval: spec.interval, client: client, broker: broker, logger: logger)
            poller.observer = observer
            return poller
        }
    }

    init(_ loaded: LoadedConfiguration, logger: Logger, makePoller: @escaping PollerMaker) throws {
        self.makePoller = makePoller
        self.logger = logger
        starts = AsyncStream.makeStream()
        var pollers: [String: RunningPoller] = [:]
        for spec in FeedbackPollerSpec.wanted(loaded) {
            pollers[spec.bundleID] = RunningPoller(spec: spec, poller: try makePoller(spec))
        }
        state = Mutex(State(pollers: pollers))
        for poller in pollers.values { starts.continuation.yield(poller) }
    }

    /// Runs the pollers, those of the start and those `follow` starts, until graceful shutdown
    /// (each ends after its poll under way) or cancellation.
    public func run() async throws {
        await withDiscardingTaskGroup { group in
            for await poller in starts.stream.cancelOnGracefulShutdown() {
                group.addTask { await poller.run() }
            }
        }
        let unstarted = state.withLock { state in
            state.accepting = false
            return state.pollers.values.filter { !$0.hasStarted }
        }
        for poller in unstarted { poller.abandon() }
    }

    public func follow(_ inForce: LoadedConfiguration) async {
        let running = state.withLock { $0.pollers.mapValues(\.spec) }
        let plan = FeedbackPollerPlan(running: running, wanted: FeedbackPollerSpec.wanted(inForce))
        guard !plan.isEmpty else { return }

        var failed: [String: any Error] = [:]
        var made: [RunningPoller] = []
        for spec in plan.started + plan.replaced {
            do {
                made.append(RunningPoller(spec: spec, poller: try makePoller(spec)))
            } catch {
                failed[spec.bundleID] = error
            }
        }
        // Old pollers end (after their poll under way) before the new ones start: never two on
        // one bundle, and the service hands each tuple to one of them. They stay listed until
        // they ended, so that `run()` ending meanwhile abandons one it never started.
        let leaving = Set(plan.stopped + plan.replaced.map(\.bundleID) + failed.keys)
        let old = state.withLock { state in leaving.compactMap { state.pollers[$0] } }
        await withTaskGroup(of: Void.self) { group in
            for poller in old { group.addTask { await poller.stop() } }
        }
        let accepted = state.withLock { state -> Bool in
            for poller in old where state.pollers[poller.spec.bundleID] === poller { state.pollers[poller.spec.bundleID] = nil }
            guard state.accepting else { return false }
            for poller in made { state.pollers[poller.spec.bundleID] = poller }
            return true
        }
        var started: Set<String> = []
        for poller in made {
            guard accepted, case .enqueued = starts.continuation.yield(poller) else {
                poller.abandon()
                continue
            }
            started.insert(poller.spec.bundleID)
        }

        var metadata: Logger.Metadata = [:]
        func add(_ key: String, _ ids: [String]) { if !ids.isEmpty { metadata[key] = "\(ids.sorted())" } }
        add("feedback.started", plan.started.map(\.bundleID).filter(started.contains))
        add("feedback.stopped", plan.stopped)
        add("feedback.replaced", plan.replaced.map(\.bundleID).filter(started.contains))
        if !metadata.isEmpty { logger.notice("feedback service pollers follow the configuration change", metadata: metadata) }
        for (bundleID, error) in failed.sorted(by: { $0.key < $1.key }) {
            logger.error(
                "feedback service poller not started: its certificate, key or CA file could not be loaded",
                metadata: ["apns.bundle": "\(bundleID)", "error": "\(error)"])
        }
    }

    /// One bundle's poller while it runs as a child of `run()`: `stop()` tells it alone to stop
    /// and waits until its poll under way ended.
    private final class RunningPoller: Sendable {
        let spec: FeedbackPollerSpec
        private let poller: FeedbackPoller<Publisher>
        private let stopSignal = StopSignal()
        private let phase = Mutex(Phase())

        private struct Phase {
            var started = false
            var ended = false
            /// Those waiting in `stop()` for the end.
            var waiters: [CheckedContinuation<Void, Never>] = []
        }

        init(spec: FeedbackPollerSpec, poller: FeedbackPoller<Publisher>) {
            self.spec = spec
            self.poller = poller
        }

        var hasStarted: Bool { phase.withLock { $0.started } }

        /// Polls until stopped; a poller stopped before it ran ends before any poll.
        func run() async {
            let first = phase.withLock { phase -> Bool in
                guard !phase.started, !phase.ended else { return false }
                phase.started = true
                return true
            }
            guard first else { return }
            await poller.run(until: stopSignal)
            finish()
        }

        func stop() async {
            stopSignal.stop()
            await withCheckedContinuation { continuation in
                let ended = phase.withLock { phase -> Bool in
                    if !phase.ended { phase.waiters.append(continuation) }
                    return phase.ended
                }
                if ended { continuation.resume() }
            }
        }

        /// Never to be run (the service ended first): whoever stops it goes on.
        func abandon() { finish() }

        private func finish() {
            let waiters = phase.withLock { phase -> [CheckedContinuation<Void, Never>] in
                phase.ended = true
                defer { phase.waiters = [] }
                return phase.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }
}
