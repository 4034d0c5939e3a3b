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

public final class FeedbackPollers<Publisher: ConfirmedPublishing>: Service, ConfigurationFollower {
    private let broker: Publisher
    private let observer: (any JobEndObserver)?
    private let logger: Logger
    private let state: Mutex<State>

    private struct State {
        var pollers: [String: Entry] = [:]
        var phase = Phase.notStarted
    }

    private enum Phase { case notStarted, running, ended }

    /// A poller and, once `run()` began, the task that runs it.
    private struct Entry {
        var spec: FeedbackPollerSpec
        var poller: FeedbackPoller<Publisher>
        var task: Task<Void, Never>?
    }

    /// - Throws: when a bundle's certificate, key or CA file cannot be loaded (at start-up, as
    ///   before any poll).
    public init(_ loaded: LoadedConfiguration, broker: Publisher, observer: (any JobEndObserver)?, logger: Logger) throws {
        self.broker = broker
        self.observer = observer
        self.logger = logger
        var pollers: [String: Entry] = [:]
        for spec in FeedbackPollerSpec.wanted(loaded) {
            pollers[spec.bundleID] = Entry(spec: spec, poller: try Self.makePoller(spec, broker: broker, observer: observer, logger: logger))
        }
        state = Mutex(State(pollers: pollers))
    }

    /// Starts the pollers, and stops them all at graceful shutdown (each after its poll under way).
    public func run() async throws {
        let entries = state.withLock { state -> [Entry] in
            state.phase = .running
            return Array(state.pollers.values)
        }
        for entry in entries { start(entry) }
        try? await gracefulShutdown()
        let tasks = state.withLock { state -> [Task<Void, Never>] in
            state.phase = .ended
            return state.pollers.values.compactMap(\.task)
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }

    public func follow(_ inForce: LoadedConfiguration) async {
        let running = state.withLock { $0.pollers.mapValues(\.spec) }
        let plan = FeedbackPollerPlan(running: running, wanted: FeedbackPollerSpec.wanted(inForce))
        guard !plan.isEmpty else { return }

        var failed: [String: any Error] = [:]
        var made: [Entry] = []
        for spec in plan.started + plan.replaced {
            do {
                made.append(Entry(spec: spec, poller: try Self.makePoller(spec, broker: broker, observer: observer, logger: logger)))
            } catch {
                failed[spec.bundleID] = error
            }
        }
        // Old pollers end (after their poll under way) before the new ones start: never two on
        // one bundle, and the service hands each tuple to one of them.
        let leaving = Set(plan.stopped + plan.replaced.map(\.bundleID) + failed.keys)
        let old = state.withLock { state -> [Task<Void, Never>] in
            let tasks = leaving.compactMap { state.pollers.removeValue(forKey: $0)?.task }
            return tasks
        }
        for task in old { task.cancel() }
        for task in old { await task.value }
        let startNow = state.withLock { state -> Bool in
            guard state.phase != .ended else { return false }
            for entry in made { state.pollers[entry.spec.bundleID] = entry }
            return state.phase == .running
        }
        if startNow { for entry in made { start(entry) } }

        let started = Set(made.map(\.spec.bundleID))
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

    private func start(_ entry: Entry) {
        let poller = entry.poller
        // Unstructured, so that one poller can be stopped alone, and detached, so that every
        // poller stops the same way whoever started it (cancelled by `run()` at graceful
        // shutdown, or by `follow`); both await the tasks they cancel.
        let task = Task.detached {
            do { try await poller.run() } catch {}
        }
        let kept = state.withLock { state -> Bool in
            guard state.phase != .ended, state.pollers[entry.spec.bundleID]?.spec == entry.spec,
                state.pollers[entry.spec.bundleID]?.task == nil
            else { return false }
            state.pollers[entry.spec.bundleID]?.task = task
            return true
        }
        if !kept { task.cancel() }
    }

    private static func makePoller(
        _ spec: FeedbackPollerSpec, broker: Publisher, observer: (any JobEndObserver)?, logger: Logger
    ) throws -> FeedbackPoller<Publisher> {
        let client = try BinaryFeedbackClient(configuration: spec.clientConfiguration, logger: logger)
        var poller = FeedbackPoller(bundleID: spec.bundleID, interval: spec.interval, client: client, broker: broker, logger: logger)
        poller.observer = observer
        return poller
    }
}
