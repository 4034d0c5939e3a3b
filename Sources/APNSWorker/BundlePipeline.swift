import AMQPClient
import APNSFleet
import APNSModel
import APNSTopologyNames
import CancellableWait
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The pipeline of one bundle ID, in the spirit of the seed's Go pipeline (part IV): the thin
/// shell that carries out what its `PipelineStateMachine` decides. Each consumed job goes
/// through these stages, composed once in `compose(_:probe:)` (`BundlePipeline+Stages.swift`):
///
///     consume → parse and validate → log → statistics → rollout gate → send → route the outcome → settle
///
/// Execution model (`docs/architecture.md`):
/// - **the control loop** (`run()`, one task per bundle) is the only code that awaits the broker
///   for the pipeline's own state: it starts and cancels the consumer, takes a held bundle's
///   probe with `basic.get`, and sleeps for the machine's timers, each in a child task of
///   `run()`'s task group, so nothing outlives `run()`. It wakes only on mail from the
///   machine's actions, never to poll;
/// - **the consumer task** (a child of `run()`) reads deliveries and composes each job in turn;
///   a job has no task of its own;
/// - **the transport's thread** (an HTTP/2 event loop, or the binary transport's) runs what
///   follows APNs' answer: classify, route, the machine's `answered`, a bare ack
///   (`ackNow` queues it for the AMQP owner thread), the counts, the log line and the
///   observer. That path never blocks, so it needs no task: a task per job would cost a
///   thread hop and an allocation on the hottest path. Only a route that publishes (retry,
///   dead letter, feedback) must await the broker's confirm, and that settle runs in a task.
/// - events from elsewhere (an operator's pause from `FleetService`, graceful shutdown) go
///   into the machine where they happen; what they need of the control loop is mailed to it.
///
/// The machine sits under one lock, taken three times per job (delivered, answered, settled),
/// never across a suspension or an IO call. In-flight work is bounded by the consumer's
/// prefetch; the machine's `limit` only guards against a broker that sends more.
///
/// The broker is a generic parameter (`AMQPConnection` in production), so the shell is tested
/// against a fake broker and a manual clock while production calls stay statically dispatched
/// once specialised.
public final class BundlePipeline<Broker: MessageBroker>: Sendable {
    public typealias Settings = BundlePipelineSettings
    typealias Machine = PipelineStateMachine<CheckedContinuation<Bool, Never>>

    /// What the machine's actions ask of the control loop.
    enum Mail: Sendable {
        case control(Machine.Control, timer: ContinuousClock.Instant?)
        /// A timer went off.
        case tick
        /// The consumer's deliveries ended with an error: `run()` throws it.
        case failed(any Error)
    }

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
    let deliveryLimit: Mutex<DeliveryLimit>
    /// The time of the breaker, the probes and the shutdown deadline.
    let clock: any PipelineClock
    /// The bundle's whole state: hold breaker, pause, consumer, jobs in flight, shutdown.
    let machine: Mutex<Machine>
    private let mail: AsyncStream<Mail>
    private let mailbox: AsyncStream<Mail>.Continuation

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
        self.deliveryLimit = Mutex(DeliveryLimit(maxDeliveries: settings.maxDeliveries))
        self.machine = Mutex(
            Machine(limit: Int(settings.prefetch), probeInterval: settings.probeInterval, shutdownDeadline: settings.shutdownDeadline))
        (mail, mailbox) = AsyncStream.makeStream()
        var logger = logger
        logger[metadataKey: "apns.bundle"] = "\(settings.bundleID)"
        self.logger = logger
    }

    public var queue: String { TopologyNames.workQueue(settings.bundleID) }

    /// Whether a provider fault holds the bundle right now (for `/ready`).
    public var isHeld: Bool { machine.withLock { $0.isHeld } }

    /// Whether an operator paused the bundle fleet-wide (contract §5): no consuming, no probing.
    public var isPaused: Bool { machine.withLock { $0.paused } }

    /// The AMQP publish time of the newest job taken (the fleet's queue latency estimate).
    public var lastTakenPublishedAt: Date? { machine.withLock { $0.lastTakenPublishedAt } }

    /// Pauses or resumes the bundle (an operator's fleet-wide pause, `FleetService`); returns
    /// whether that changed anything. A pause ends a consumer waiting for its next delivery.
    @discardableResult
    public func setPaused(_ paused: Bool) -> Bool {
        event { $0.setPaused(paused, now: clock.now) }
    }

    /// The bundle's APNs connections by state, when its transport reports them.
    public func connectionStates() -> [TransportConnectionState: Int]? {
        (transport as? any TransportStatusReporting)?.connectionStates()
    }

    public func updateRollout(_ rule: RolloutRule) {
        rollout.withLock { $0 = rule }
        logger.info("rollout rule updated")
    }

    /// Consumes until graceful shutdown (or cancellation). Jobs in flight at shutdown get
    /// `shutdownDeadline` to finish; whatever is unacked then goes back to the broker. Runs once.
    public func run() async throws {
        logger.info("pipeline started", metadata: ["amqp.queue": "\(queue)", "amqp.prefetch": "\(settings.prefetch)"])
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                try await control(&group)
                // Only timers may still sleep; the consumer has ended.
                group.cancelAll()
            }
        } onGracefulShutdown: {
            self.event { $0.shutdown(now: self.clock.now) }
        }
        let jobs = statistics.activity(bundle: settings.bundleID).jobs
        var metadata: Logger.Metadata = [:]
        for end in OutcomeRouter.End.allCases { metadata["jobs.\(end.rawValue)"] = "\(jobs[end.rawValue] ?? 0)" }
        logger.info("pipeline stopped", metadata: metadata)
    }

    // MARK: - The control loop

    /// Carries out the machine's control actions until it says `finish` (or the task is
    /// cancelled, which ends the mail). The consumer and the timers are child tasks of `group`.
    private func control(_ group: inout ThrowingDiscardingTaskGroup<any Error>) async throws {
        var consumer: Broker.Consumer?
        event { $0.start(now: clock.now) }
        do {
            for await mail in mail {
                switch mail {
                case .failed(let error):
                    throw error
                case .tick:
                    event { $0.tick(now: clock.now) }
                case .control(let control, let timer):
                    if let timer {
                        group.addTask { [clock, mailbox] in
                            guard (try? await clock.sleep(for: clock.now.duration(to: timer))) != nil else { return }
                            mailbox.yield(.tick)
                        }
                    }
                    switch control {
                    case .none:
                        break
                    case .startConsumer:
                        let maxBodyBytes = JobParser.Limits().maxBodyBytes
                        let started = try await broker.consume(
                            queue: queue, prefetch: settings.prefetch, maxBodySize: maxBodyBytes,
                            oversizedDeadLetter: { [router] properties, size in
                                router.oversizedDeadLetter(properties: properties, bodySize: size, maxBodyBytes: maxBodyBytes, now: Date())
                            })
                        consumer = started
                        group.addTask { await self.consume(started) }
                        event { $0.consumerStarted() }
                    case .cancelConsumer:
                        await consumer?.cancel()
                    case .probe:
                        try await probe()
                    case .finish:
                        return
                    }
                }
            }
        } catch {
            await endConsumer(consumer)
            throw error
        }
        // Cancelled: end the consumer, or the task group would wait for it forever.
        await endConsumer(consumer)
    }

    private func endConsumer(_ consumer: Broker.Consumer?) async {
        guard let consumer, machine.withLock({ $0.consumer != .idle }) else { return }
        await consumer.cancel()
    }

    /// The consumer task: every delivery in turn, until the consumer is cancelled.
    private func consume(_ consumer: Broker.Consumer) async {
        do {
            for try await delivery in consumer { await take(delivery) }
        } catch {
            mailbox.yield(.failed(error))
        }
        event { $0.consumerEnded(now: clock.now) }
    }

    private func take(_ delivery: AMQPDelivery) async {
        // A publish time far ahead of this clock is not kept: as the newest it would stick.
        let publishedAt = QueueLatency.believable(delivery.message.properties.timestamp, now: Date())
        var intake = machine.withLock { $0.delivered(publishedAt: publishedAt) }
        if intake == .waitForRoom {
            let admitted = await withCancellableWait(
                register: { waiter in machine.withLock { $0.parkForRoom(waiter) }.map { $0 == .compose } },
                withdraw: { self.machine.withLock { $0.cancelRoomWait() } },
                cancelled: false)
            intake = admitted ? .compose : .refuse
        }
        if intake == .compose {
            compose(delivery, probe: false)
        } else {
            // Held, paused, shutting down, or sent after the cancel: back to the broker untouched.
            await broker.nack(delivery, requeue: true)
        }
    }

    /// A held bundle's probe: one job taken with `basic.get`, composed like any other.
    private func probe() async throws {
        let delivery = try await broker.get(queue: queue)
        let intake = event {
            $0.probeTaken(
                found: delivery != nil, publishedAt: QueueLatency.believable(delivery?.message.properties.timestamp, now: Date()), now: clock.now)
        }
        guard let delivery else { return }
        if intake == .compose {
            logger.info("probing held bundle with one job")
            compose(delivery, probe: true)
        } else {
            await broker.nack(delivery, requeue: true)
        }
    }

    // MARK: - Carrying out actions

    /// Applies an event to the machine and carries out its action: control work is mailed under
    /// the lock (so the control loop sees it in the machine's order), the rest after it.
    @discardableResult
    func event<Result: Sendable>(_ body: (inout Machine) -> (Result, Machine.Action)) -> Result {
        let (result, action) = machine.withLock { machine in
            let (result, action) = body(&machine)
            if action.needsControl { mailbox.yield(.control(action.control, timer: action.timer)) }
            return (result, action)
        }
        if let wake = action.wake { wake.waiter.resume(returning: wake.admitted) }
        if action.news != .none { announce(action.news) }
        return result
    }

    func event(_ body: (inout Machine) -> Machine.Action) {
        event { machine in ((), body(&machine)) }
    }

    /// One error line when a hold starts, one notice when it ends, one warning for jobs
    /// abandoned at the shutdown deadline; never one per job.
    private func announce(_ news: Machine.News) {
        switch news {
        case .none:
            break
        case .held(let reason, let status):
            bundleStatistics.held(true)
            logger.error(
                "APNs rejects this bundle's credentials or topic: bundle HELD, jobs stay in the broker until a probe succeeds",
                metadata: ["apns.reason": "\(reason)", "apns.status": "\(status)"])
        case .resumed(let heldFor):
            bundleStatistics.held(false)
            logger.notice("bundle resumed: APNs accepts its credentials again", metadata: ["held.seconds": "\(heldFor)"])
        case .abandoned(let jobs):
            // Unfinished jobs stay unacked; the broker delivers them again.
            logger.warning("jobs still in flight at the deadline are left to the broker", metadata: ["jobs": "\(jobs)"])
        }
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
