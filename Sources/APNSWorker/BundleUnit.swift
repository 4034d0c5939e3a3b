import AMQPClient
import APNSConfig
import APNSModel
import Logging
import Synchronization

/// Where a bundle's transports come from: one per environment, acquired when the bundle's unit
/// starts and released when it has stopped (its jobs in flight ended). The source owns and runs
/// what it hands out; a release lets it drain and close what no unit uses any more.
///
/// `apns-worker run` uses `TransportPools`: one pool per credential, environment and endpoint,
/// shared by the bundles whose keys are equal, drained and closed when no unit uses it.
public protocol TransportSource: Sendable {
    func acquire(bundle: BundleConfiguration, environment: APNSEnvironment) throws -> any NotificationTransport
    func release(bundle: BundleConfiguration, environment: APNSEnvironment)
}

/// One configured bundle while it runs: its pipeline and the transports it sends through. The
/// worker starts and stops units at run time (`WorkerService.apply`): a removed bundle's unit
/// stops, a bundle with new credentials gets a new unit with new transports.
public final class BundleUnit<Broker: MessageBroker>: Sendable {
    /// Nil for a unit over a pipeline the caller made.
    public let bundle: BundleConfiguration?
    public let pipeline: BundlePipeline<Broker>
    let source: (any TransportSource)?
    let environments: [APNSEnvironment]
    private let ended = Mutex<Ended>(.running(waiters: []))
    private let started = Mutex(false)

    private enum Ended {
        case running(waiters: [CheckedContinuation<Void, Never>])
        case ended
    }

    /// A unit whose transports the worker acquired from `source` for `environments`; a nil
    /// source means the caller owns the transports (tests, `WorkerService(pipelines:)`).
    init(bundle: BundleConfiguration?, pipeline: BundlePipeline<Broker>, source: (any TransportSource)?, environments: [APNSEnvironment]) {
        self.bundle = bundle
        self.pipeline = pipeline
        self.source = source
        self.environments = environments
    }

    public var bundleID: String { pipeline.settings.bundleID }

    /// Runs the pipeline until it is stopped or the worker shuts down, then releases the
    /// transports (only now: the jobs in flight were still using them).
    func run() async throws {
        started.withLock { $0 = true }
        defer { finish() }
        try await pipeline.run()
    }

    /// Stops the pipeline and waits until its jobs in flight have ended and its transports were
    /// released.
    func stop() async {
        pipeline.stop()
        await withCheckedContinuation { continuation in
            let resumeNow = ended.withLock { state -> Bool in
                switch state {
                case .running(var waiters):
                    waiters.append(continuation)
                    state = .running(waiters: waiters)
                    return false
                case .ended:
                    return true
                }
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// The unit will never run (the worker shut down before it started): its transports are
    /// released and anyone stopping it goes on.
    func abandon() {
        finish()
    }

    /// Whether `run()` began (a unit that never did is abandoned when the worker stops).
    var hasStarted: Bool { started.withLock { $0 } }

    private func finish() {
        let (first, waiters) = ended.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
            guard case .running(let waiters) = state else { return (false, []) }
            state = .ended
            return (true, waiters)
        }
        guard first else { return }
        if let source, let bundle {
            for environment in environments { source.release(bundle: bundle, environment: environment) }
        }
        for waiter in waiters { waiter.resume() }
    }
}
