import AMQPClient
import APNSConfig
import APNSFleet
import APNSModel
import APNSTopology
import APNSTopologyNames
import CancellableWait
import Foundation
import Logging
import QueueConsumer
import ServiceClock
import Synchronization

/// The pipeline of one bundle ID, in the spirit of the seed's Go pipeline (part IV): the work
/// of one `QueueConsumer` (the generic consumer with hold, probe, pause, drain and the in-flight
/// bound, `docs/architecture.md`), whose probe is one job taken with `basic.get`. Each consumed
/// job goes through these stages, composed once in `compose(_:probe:)`
/// (`BundlePipeline+Stages.swift`):
///
///     consume → parse and validate → log → statistics → rollout gate → send → route the outcome → settle
///
/// Execution model (`docs/architecture.md`): the consumer's control loop, its consumer task and
/// its settle runner are children of `run()` (`QueueConsumer`); the stages before sending run in
/// the consumer task; **the transport's thread** (an HTTP/2 event loop, or the binary
/// transport's) runs what follows APNs' answer: classify, route, the machine's `answered`, a
/// bare ack (`ackNow` queues it for the AMQP owner thread), the counts, the log line and the
/// observer. That path never blocks, so it needs no task: a task per job would cost a thread hop
/// and an allocation on the hottest path. Only a route that publishes (retry, dead letter,
/// feedback) must await the broker's confirm: that settle is mailed to the settle runner, a
/// child of `run()`, so it never outlives it.
///
/// The broker is a generic parameter (`AMQPConnection` in production), so the shell is tested
/// against a fake broker and a manual clock while production calls stay statically dispatched
/// once specialised. Every time the pipeline and its stages use comes from `clock`.
public final class BundlePipeline<Broker: MessageBroker>: Sendable {
    public typealias Settings = BundlePipelineSettings

    public let settings: Settings
    package let broker: Broker
    let transport: any NotificationTransport
    /// Replaced at run time by `updateRetryPolicy(_:)` (a `[retry]` change while running).
    let routerState: Mutex<OutcomeRouter>
    var router: OutcomeRouter { routerState.withLock { $0 } }
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
    let deliveryLimit: Mutex<DeliveryLimit>
    /// The time of the breaker, the probes, the shutdown deadline, a job's timings and the times
    /// written into its messages.
    let clock: any ConsumerClock
    /// Where the consumer's window starts and the most it takes (`updateInFlightBounds(_:)`).
    let inFlightBounds: Mutex<BundleInFlightBounds>
    /// The bundle's consumer: hold breaker, pause, consumer, jobs in flight, shutdown.
    let consumer: QueueConsumer<BundlePipeline>
    /// The settles that publish, gathered into the batch published next (`BundlePipeline+Publishing.swift`).
    let publishing = Mutex(PublishBatcher<PublishingSettle>(limit: BundlePipeline.publishBatchLimit))

    public init(
        settings: BundlePipelineSettings, broker: Broker, transport: any NotificationTransport,
        rollout: RolloutRule = .open, statistics: WorkerStatistics, logger: Logger, observer: (any JobEndObserver)? = nil,
        clock: any ConsumerClock = SystemConsumerClock(), tracing: PipelineTracing? = nil
    ) {
        self.clock = clock
        self.tracing = tracing
        self.observer = observer
        self.settings = settings
        self.broker = broker
        self.transport = transport
        self.routerState = Mutex(OutcomeRouter(bundleID: settings.bundleID, retryPolicy: settings.retryPolicy, events: settings.events))
        self.statistics = statistics
        let bundleStatistics = statistics.bundle(settings.bundleID)
        self.bundleStatistics = bundleStatistics
        self.rollout = Mutex(rollout)
        self.deliveryLimit = Mutex(DeliveryLimit(maxDeliveries: settings.maxDeliveries))
        var logger = logger
        logger[metadataKey: "apns.bundle"] = "\(settings.bundleID)"
        self.logger = logger
        let alerts = HoldAlertLog()
        let consumer = QueueConsumer<BundlePipeline>(
            limit: Int(settings.prefetch), probeInterval: settings.probeInterval, shutdownDeadline: settings.shutdownDeadline,
            clock: clock, announce: { [logger] news in BundlePipeline.announce(news, logger: logger, alerts: alerts, now: clock.now) })
        self.consumer = consumer
        bundleStatistics.countInFlight { consumer.inFlight }
        // The consumer holds its share of what the transport's window asks, never
        // less than the prefetch it starts with; a pipeline gone (its bundle removed while
        // running) stops listening.
        // It never takes more than its share of the budget, which a reload may change.
        self.inFlightBounds = Mutex(settings.inFlightBounds)
        if let windowed = transport as? any InFlightWindowReporting {
            windowed.observeInFlightWindow { [weak self] window in
                guard let self else { return false }
                consumer.resize(to: inFlightBounds.withLock { $0.limit(forWindowShare: window) })
                return true
            }
        }
    }

    /// Bundles were added or removed while running: this consumer's share of `[amqp] maxInFlight`
    /// changed. A smaller ceiling is followed at once (the consumer re-consumes with it as its
    /// prefetch); a larger one lets the window grow further.
    public func updateInFlightBounds(_ new: BundleInFlightBounds) {
        let old = inFlightBounds.withLock { bounds in
            defer { bounds = new }
            return bounds
        }
        guard old != new else { return }
        if consumer.limit > new.ceiling { consumer.resize(to: new.ceiling, force: true) }
        logger.info(
            "in-flight share updated", metadata: ["amqp.bundlePrefetch": "\(new.floor)", "amqp.bundleWindowCeiling": "\(new.ceiling)"])
    }

    public var queue: String { TopologyNames.workQueue(settings.bundleID) }

    /// Whether a provider fault holds the bundle right now (for `/ready`).
    public var isHeld: Bool { consumer.isHeld }

    /// Whether an operator paused the bundle fleet-wide (contract §5): no consuming, no probing.
    public var isPaused: Bool { consumer.isPaused }

    /// The AMQP publish time of the newest job taken (the fleet's queue latency estimate).
    public var lastTakenPublishedAt: Date? { consumer.lastTakenPublishedAt }

    /// Pauses or resumes the bundle (an operator's fleet-wide pause, `FleetService`); returns
    /// whether that changed anything. A pause ends a consumer waiting for its next delivery.
    @discardableResult
    public func setPaused(_ paused: Bool) -> Bool {
        consumer.setPaused(paused)
    }

    /// The bundle's APNs connections by state, when its transport reports them.
    public func connectionStates() -> [TransportConnectionState: Int]? {
        (transport as? any TransportStatusReporting)?.connectionStates()
    }

    public func updateRollout(_ rule: RolloutRule) {
        rollout.withLock { $0 = rule }
        logger.info("rollout rule updated")
    }

    /// A `[retry]` change while running: the jobs answered from now on are retried by it.
    public func updateRetryPolicy(_ policy: RetryPolicy) {
        routerState.withLock { $0.retryPolicy = policy }
        logger.info("retry policy updated")
    }

    /// An `events` change while running: the jobs answered from now on follow it.
    public func updateEvents(_ level: DeliveryEventLevel) {
        guard routerState.withLock({ router in
            defer { router.events = level }
            return router.events != level
        }) else { return }
        logger.info("delivery events updated", metadata: ["apns.events": "\(level.rawValue)"])
    }

    /// Stops this pipeline alone (its bundle was removed or is being rebuilt): no more jobs are
    /// taken, and `run()` returns once those in flight have ended and settled; the rest wait in
    /// the broker.
    public func stop() {
        consumer.stop()
    }

    /// Consumes until graceful shutdown (or cancellation). Jobs in flight at shutdown get
    /// `shutdownDeadline` to finish; whatever is unacked then goes back to the broker. Runs once.
    public func run() async throws {
        logger.info("pipeline started", metadata: ["amqp.queue": "\(queue)", "amqp.prefetch": "\(settings.prefetch)"])
        try await consumer.run(self)
        let jobs = statistics.activity(bundle: settings.bundleID).jobs
        var metadata: Logger.Metadata = [:]
        for end in JobEnd.pipelineEnds { metadata["jobs.\(end.label)"] = "\(jobs[end.label] ?? 0)" }
        logger.info("pipeline stopped", metadata: metadata)
    }

    /// One error line when a hold starts, one notice when it ends, one warning for jobs
    /// abandoned at the shutdown deadline; never one per job, nor one per flap: the same fault
    /// met again soon after a hold ended is told at info (`HoldAlerts`). (The hold's gauge,
    /// `apns_worker_consumer_paused{reason="held"}`, has one writer: the admin's scrape, from
    /// `isHeld`.)
    private static func announce(
        _ news: QueueConsumer<BundlePipeline>.Machine.News, logger: Logger, alerts: HoldAlertLog, now: @autoclosure () -> ContinuousClock.Instant
    ) {
        switch news {
        case .none:
            break
        case .held(let reason, let status):
            let metadata: Logger.Metadata = ["apns.reason": "\(reason)", "apns.status": "\(status)"]
            if alerts.held(reason: reason, now: now()) {
                logger.error(
                    "APNs rejects this bundle's credentials or topic: bundle HELD, jobs stay in the broker until a probe succeeds",
                    metadata: metadata)
            } else {
                logger.info("bundle held again for the reason of its last hold, which ended recently", metadata: metadata)
            }
        case .resumed(let heldFor):
            if alerts.resumed(now: now()) {
                logger.notice("bundle resumed: APNs accepts its credentials again", metadata: ["held.seconds": "\(heldFor)"])
            } else {
                logger.info("bundle resumed again", metadata: ["held.seconds": "\(heldFor)"])
            }
        case .abandoned(let jobs):
            // Unfinished jobs are handed back (their channel closes); the broker delivers them again.
            logger.warning("jobs still in flight at the deadline are handed back to the broker", metadata: ["jobs": "\(jobs)"])
        case .brokerFailed(let reason):
            logger.error(
                "broker unavailable: this bundle's consumer (or a held bundle's probe) is tried again every probe interval until it is back",
                metadata: ["amqp.error": "\(reason)"])
        case .brokerRecovered:
            logger.notice("broker reachable again: the bundle consumes (or probes) again")
        }
    }
}

/// The bundle pipeline as a queue consumer's work: the work queue, a probe by `basic.get`.
extension BundlePipeline: ConsumerWork {
    package var maxBodySize: Int { JobParser.Limits().maxBodyBytes }

    package var oversizedDeadLetter: AMQPOversizedDeadLetter? {
        let clock = clock
        return DeadOnArrival.oversizedDeadLetter(queue: TopologyNames.deadQueue(settings.bundleID), maxBodyBytes: maxBodySize) { clock.wallTime }
    }

    /// A publish time far ahead of this clock is not kept: as the newest it would stick.
    package func publishTime(of delivery: AMQPDelivery) -> Date? {
        QueueLatency.believable(delivery.message.properties.timestamp, now: clock.wallTime)
    }

    /// A held bundle's probe: one job taken with `basic.get`, composed like any other (a body
    /// over the limit copied to the dead queue as it arrives, as the consumer's are).
    package func probe() async throws -> ConsumerProbe {
        guard let delivery = try await broker.get(queue: queue, maxBodySize: maxBodySize, oversizedDeadLetter: oversizedDeadLetter)
        else { return .nothing }
        return .found(delivery)
    }

    package func start(_ delivery: AMQPDelivery, probe: Bool, on consumer: QueueConsumer<BundlePipeline>) {
        if probe { logger.info("probing held bundle with one job") }
        compose(delivery, probe: probe)
    }

    /// A job handed back unsent (a hold, a pause, a stop, a re-consume) goes to the end of its
    /// work queue as a confirmed copy, and only then is its delivery acked: on a quorum queue a
    /// nack counts as a delivery, and a job the worker never tried is no poison job (contract
    /// §4; docs/decisions.md, "Hand-backs are copies"). A delivery whose body or header table was
    /// not kept (too large, nested too deep) has nothing to copy: nacked, it is dead-lettered
    /// when next taken.
    package func handBack(_ delivery: AMQPDelivery, on consumer: QueueConsumer<BundlePipeline>) async {
        let message = delivery.message
        guard message.oversizedBodySize == nil, message.oversizedPropertiesSize == nil, !message.headersNestedTooDeep else {
            await broker.nack(delivery, requeue: true)
            return
        }
        let copy = router.handedBack(message)
        consumer.settleLater { await self.publishThenAck(delivery, copy) }
    }
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
    /// The most jobs the consumer takes as its window grows (its share of `[amqp]
    /// maxInFlight`); nil: no bound beyond what the transport's window asks.
    public var inFlightCeiling: Int?
    /// `[apns "…"] events`: the delivery events of jobs that do not say (contract §8).
    public var events: DeliveryEventLevel = .none

    /// `prefetch` as the floor, `inFlightCeiling` as the ceiling.
    public var inFlightBounds: BundleInFlightBounds {
        inFlightCeiling.map { BundleInFlightBounds(floor: Int(prefetch), ceiling: $0) } ?? .unbounded(floor: Int(prefetch))
    }

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
