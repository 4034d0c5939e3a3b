import AMQPClient
import APNSCore
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The pipeline of one bundle ID, in the spirit of the seed's Go pipeline (part IV). Each
/// consumed job goes through these stages, composed in `start(_:jobs:)` and each a small
/// function of its own (`BundlePipeline+Stages.swift`):
///
///     consume → parse and validate → log → statistics → rollout gate → send → route the outcome
///
/// One task per bundle consumes; a job has no task of its own: APNs' answer is routed and a
/// bare ack settled on the thread that read it, and only a publish waits for its confirm in a
/// task. In-flight work is bounded by the consumer's prefetch: the broker never hands out more
/// unacknowledged jobs, and `InFlightJobs` never lets more than `prefetch` start. A held
/// outcome (provider fault) stops consuming; the pipeline then probes with one job at a time
/// (`basic.get`) until one is not held, and consumes again, with no restart.
///
/// The broker is a generic parameter (`AMQPConnection` in production), so the hold, probe,
/// shutdown-deadline and settle logic are tested against a fake broker and a manual clock while
/// production calls stay statically dispatched once specialised.
public final class BundlePipeline<Broker: MessageBroker>: Sendable {
    public typealias Settings = BundlePipelineSettings

    public let settings: Settings
    let broker: Broker
    let transport: any NotificationTransport
    let router: OutcomeRouter
    let statistics: WorkerStatistics
    /// This bundle's counters and timers, made once.
    let bundleStatistics: BundleStatistics
    let logger: Logger
    /// Told of every job's final end and invalid token (the registry's counts and marks); never blocks.
    let observer: (any JobEndObserver)?
    /// `[tracing]`: a span per job (`JobTracing.swift`); nil when tracing is off.
    let tracing: PipelineTracing?
    /// The rule of the rollout gate; replaced at run time by `updateRollout(_:)` (config reload).
    let rollout: Mutex<RolloutRule>
    let breaker: Mutex<HoldBreaker>
    let deliveryLimit: Mutex<DeliveryLimit>
    /// The time of the breaker, the probes and the shutdown deadline.
    let clock: any PipelineClock
    /// The operator's fleet-wide pause and the queue latency estimate (`BundleFleetState`).
    public let fleet = BundleFleetState()

    public init(
        settings: BundlePipelineSettings, broker: Broker, transport: any NotificationTransport,
        rollout: RolloutRule = .open, statistics: WorkerStatistics, logger: Logger, observer: (any JobEndObserver)? = nil,
        clock: any PipelineClock = SystemPipelineClock(), tracing: PipelineTracing? = nil
    ) {
        self.clock = clock
        self.tracing = tracing
        self.observer = observer
        self.settings = settings
        self.broker = broker
        self.transport = transport
        self.router = OutcomeRouter(bundleID: settings.bundleID, retryPolicy: settings.retryPolicy)
        self.statistics = statistics
        self.bundleStatistics = statistics.bundle(settings.bundleID)
        self.rollout = Mutex(rollout)
        self.breaker = Mutex(HoldBreaker(probeInterval: settings.probeInterval))
        self.deliveryLimit = Mutex(DeliveryLimit(maxDeliveries: settings.maxDeliveries))
        var logger = logger
        logger[metadataKey: "apns.bundle"] = "\(settings.bundleID)"
        self.logger = logger
    }

    public var queue: String { TopologyNames.workQueue(settings.bundleID) }

    /// Whether a provider fault holds the bundle right now (for `/ready`).
    public var isHeld: Bool { breaker.withLock { $0.isHeld } }

    /// Whether an operator paused the bundle fleet-wide (contract §5): no consuming, no probing.
    public var isPaused: Bool { fleet.isPaused }

    /// The bundle's APNs connections by state, when its transport reports them.
    public func connectionStates() -> [TransportConnectionState: Int]? {
        (transport as? any TransportStatusReporting)?.connectionStates()
    }

    public func updateRollout(_ rule: RolloutRule) {
        rollout.withLock { $0 = rule }
        logger.info("rollout rule updated")
    }

    /// Consumes until graceful shutdown (or cancellation). Jobs in flight at shutdown get
    /// `shutdownDeadline` to finish; whatever is unacked then goes back to the broker.
    public func run() async throws {
        logger.info("pipeline started", metadata: ["amqp.queue": "\(queue)", "amqp.prefetch": "\(settings.prefetch)"])
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            if isPaused {
                try await Task.sleep(for: .milliseconds(200))
            } else if isHeld {
                try await probeOnce()
            } else {
                try await consumeUntilHeldOrShutdown()
            }
        }
        let jobs = statistics.activity(bundle: settings.bundleID).jobs
        var metadata: Logger.Metadata = [:]
        for end in OutcomeRouter.End.allCases { metadata["jobs.\(end.rawValue)"] = "\(jobs[end.rawValue] ?? 0)" }
        logger.info("pipeline stopped", metadata: metadata)
    }

    // MARK: - Consuming

    private func consumeUntilHeldOrShutdown() async throws {
        let consumer = try await broker.consume(queue: queue, prefetch: settings.prefetch)
        let limit = max(Int(settings.prefetch), 1)
        // Stop taking jobs as soon as shutdown starts or the bundle becomes held; jobs already
        // taken run on, within the shutdown deadline.
        let stop = StopSignal()
        // A pause must end a consumer that waits for its next delivery, as a shutdown does.
        let pauseWatcher = fleet.whenPaused { Task { await consumer.cancel() } }
        defer { fleet.removeWatcher(pauseWatcher) }
        try await withGracefulShutdownHandler {
            let jobs = InFlightJobs()
            var iterator = consumer.makeAsyncIterator()
            while !stop.isSet, !isHeld, !isPaused, let delivery = try await iterator.next() {
                // The broker's prefetch bounds the jobs in flight; this only guards against a
                // broker that sends more.
                var refused = stop.isSet || isHeld || isPaused
                if !refused { refused = await !jobs.waitUntil(atMost: limit - 1) }
                if refused {
                    await broker.nack(delivery, requeue: true)
                    break
                }
                start(delivery, jobs: jobs)
            }
            await consumer.cancel()
            // Deliveries the broker pushed before the cancel took effect go back untouched.
            while let leftover = try await iterator.next() {
                await broker.nack(leftover, requeue: true)
            }
            guard jobs.count > 0 else { return }
            let deadline = settings.shutdownDeadline
            let allSettled = await withTaskGroup(of: Bool.self) { group in
                group.addTask { await jobs.waitUntil(atMost: 0) }
                group.addTask {
                    try? await self.clock.sleep(for: deadline)
                    return false
                }
                let first = await group.next() ?? false
                group.cancelAll()
                return first
            }
            if !allSettled {
                // Unfinished jobs stay unacked; the broker delivers them again.
                jobs.abandon()
                logger.warning("jobs still in flight at the deadline are left to the broker", metadata: ["jobs": "\(jobs.count)"])
            }
        } onGracefulShutdown: {
            stop.set()
            // The handler must not block, and the consume loop may be waiting for a delivery
            // that never comes: cancelling the consumer ends its sequence. Short-lived by design.
            Task { await consumer.cancel() }
        }
    }

    // MARK: - Probing while held

    /// How often a held pipeline asks the breaker whether a probe is due.
    static var heldPollInterval: Duration { .milliseconds(200) }

    private func probeOnce() async throws {
        let now = clock.now
        let due = breaker.withLock { $0.probeDue(now: now) }
        guard due == .sendProbe else {
            try await clock.sleep(for: Self.heldPollInterval)
            return
        }
        guard let delivery = try await broker.get(queue: queue) else {
            let now = clock.now
            breaker.withLock { $0.probeFoundNothing(now: now) }
            return
        }
        logger.info("probing held bundle with one job")
        await process(delivery)
    }

    /// Carries out an outcome's effect on the hold breaker: one error line when a hold starts,
    /// one notice when it ends.
    func applyToBreaker(_ effect: OutcomeRouter.BreakerEffect) {
        let now = clock.now
        switch effect {
        case .hold(let reason, let status):
            if case .pauseAndAlert = breaker.withLock({ $0.heldOutcome(reason: reason, now: now) }) {
                bundleStatistics.held(true)
                logger.error(
                    "APNs rejects this bundle's credentials or topic: bundle HELD, jobs stay in the broker until a probe succeeds",
                    metadata: ["apns.reason": "\(reason)", "apns.status": "\(status)"])
            }
        case .healthy:
            if case .resume(let heldFor) = breaker.withLock({ $0.healthyOutcome(now: now) }) {
                bundleStatistics.held(false)
                logger.notice("bundle resumed: APNs accepts its credentials again", metadata: ["held.seconds": "\(heldFor)"])
            }
        }
    }

    /// One job reached `end`. The one place a job's end is counted: the tally behind the stop
    /// line, the admin page and `/api/status`, the Prometheus counter (both in
    /// `BundleStatistics.jobEnded`), and the registry's hourly counts (the observer).
    func count(_ end: OutcomeRouter.End, since started: ContinuousClock.Instant) {
        if let kind = JobEndKind(end) { observer?.jobEnded(bundleID: settings.bundleID, end: kind) }
        bundleStatistics.jobEnded(end, after: started.duration(to: .now))
    }

    /// Carries out a route: publish (confirmed), then ack. A publish that fails (connection lost,
    /// returned, nacked) leaves the job unacked so the broker delivers it again: at-least-once.
    func settle(_ delivery: AMQPDelivery, _ route: OutcomeRouter.Route) async {
        switch route {
        case .ack:
            await broker.ack(delivery)
        case .publishThenAck(let message, _):
            do {
                try await broker.publish(message)
                await broker.ack(delivery)
            } catch {
                logger.warning(
                    "could not publish the job's outcome; the broker will deliver the job again",
                    metadata: ["amqp.error": "\(error)", "amqp.routing_key": "\(message.routingKey)"])
                await broker.nack(delivery, requeue: true)
            }
        }
    }
}

/// A one-way flag shared between the consume loop and the tasks it spawned.
final class StopSignal: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}

/// What a bundle's pipeline is told by the configuration.
public struct BundlePipelineSettings: Sendable {
    public var bundleID: String
    public var defaultEnvironment: APNSEnvironment
    public var transportKind: TransportKind
    public var prefetch: UInt16
    public var retryPolicy: RetryPolicy
    /// Time between probes while the bundle is held.
    public var probeInterval: Duration
    /// On graceful shutdown, how long jobs in flight may take to finish.
    public var shutdownDeadline: Duration
    /// Deliveries after which a job is a poison job (`DeliveryLimit`).
    public var maxDeliveries: Int

    public init(
        bundleID: String, defaultEnvironment: APNSEnvironment = .production, transportKind: TransportKind = .http2,
        prefetch: UInt16 = 500, retryPolicy: RetryPolicy = .standard, probeInterval: Duration = .seconds(5),
        shutdownDeadline: Duration = .seconds(30), maxDeliveries: Int = 20
    ) {
        self.maxDeliveries = maxDeliveries
        self.bundleID = bundleID
        self.defaultEnvironment = defaultEnvironment
        self.transportKind = transportKind
        self.prefetch = prefetch
        self.retryPolicy = retryPolicy
        self.probeInterval = probeInterval
        self.shutdownDeadline = shutdownDeadline
    }
}
