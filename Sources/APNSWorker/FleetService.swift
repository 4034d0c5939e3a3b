import AMQPClient
import APNSFleet
import APNSModel
import APNSTopology
import APNSTopologyNames
import Foundation
import Logging
import ServiceClock
import ServiceLifecycle
import Synchronization

/// Who this instance is in the fleet (`FleetService.Identity`).
public struct FleetIdentity: Sendable, Hashable {
    public var instanceID: String
    public var host: String
    public var pid: Int32
    public var version: String
    public var startedAt: Date

    /// This process: `<host>-<pid>-<random>` (pids repeat across hosts and restarts).
    public static func current(version: String) -> FleetIdentity {
        of(host: ProcessInfo.processInfo.hostName, pid: ProcessInfo.processInfo.processIdentifier, version: version)
    }

    /// A process on `host`. The host name is the machine's (a DNS name may have 253 bytes), and
    /// the id goes where bounds apply: a heartbeat's `id` (`FleetInstance.maxIDBytes`, else every
    /// view ignores this instance) and the name of its fleet queue, `apns.fleet.instance.<id>`
    /// (an AMQP short string, else the fleet service cannot declare it, `invalidName`). So the
    /// host's part of the id is cut to fit, and the heartbeat's `host` to `maxHostBytes`.
    static func of(host: String, pid: Int32, version: String) -> FleetIdentity {
        let tail = "-\(pid)-\(UUID().uuidString.prefix(6).lowercased())"
        let id = host.prefix(utf8Bytes: FleetInstance.maxIDBytes - tail.utf8.count) + tail
        return FleetIdentity(
            instanceID: id, host: host.prefix(utf8Bytes: FleetInstance.maxHostBytes), pid: pid, version: version, startedAt: Date())
    }

    public init(instanceID: String, host: String, pid: Int32, version: String, startedAt: Date) {
        self.instanceID = instanceID
        self.host = host
        self.pid = pid
        self.version = version
        self.startedAt = startedAt
    }
}

private extension String {
    /// The longest prefix of whole characters that has at most `limit` bytes of UTF-8.
    func prefix(utf8Bytes limit: Int) -> String {
        var bytes = 0
        var end = startIndex
        for index in indices {
            bytes += self[index].utf8.count
            guard bytes <= limit else { break }
            end = self.index(after: index)
        }
        return String(self[..<end])
    }
}

/// What the fleet service uses of its broker: its heartbeat queue's declaration and consumer,
/// confirmed publishes, and the pause markers (declared, deleted, passively declared).
public typealias FleetBroker = MessageConsuming & ConfirmedPublishing & TopologyDeclaring

/// This instance's part in the fleet (contract §5), as a ServiceLifecycle service on the
/// worker's broker connection:
///
/// - every `interval` it publishes a heartbeat (its id, host, pid, version, start, RSS, CPU,
///   per-bundle counts, in flight, held and paused bundles, connection states) to `apns.fleet`,
///   with a TTL of three intervals;
/// - it hears every instance's heartbeat (its own included) on an exclusive, auto-deleted queue
///   and keeps the latest of each in a `FleetView`, which the admin server reads;
/// - it applies pause and resume control messages to its pipelines at once, and reconciles every
///   pipeline with the durable pause markers every interval, so a lost control message or a
///   restart costs at most one interval.
public final class FleetService<Broker: FleetBroker>: Service, Sendable {
    public typealias Identity = FleetIdentity

    public let identity: Identity
    public let interval: Duration
    let broker: Broker
    let worker: any FleetMember
    let view: Mutex<FleetView>
    /// The kinds of drop already logged (`noteDropped`).
    private let droppedLogged = Mutex(Set<String>())
    /// Orders pause-marker checks: a check's answer is applied only if no check started later
    /// was applied first (checks run in order on the connection's control channel).
    private let pauseChecks = Mutex(PauseChecks())
    let logger: Logger
    /// The heartbeat interval's time and the view's wall-clock time.
    let clock: any ConsumerClock

    struct PauseChecks {
        var next = 0
        var applied: [String: Int] = [:]
    }

    /// Bundles a pause or resume message named since their marker was last read. Anyone who may
    /// publish on the vhost can send these, so the listener never reads a marker itself: it adds
    /// the bundle here and goes on, and `reconcileRequested` reads each marker once for however
    /// many messages named it meanwhile (a flood costs a round trip per bundle, not per message).
    private let pauseRequests = Mutex(Set<String>())
    /// Wakes `reconcileRequested` of the current `run()`.
    private let pauseRequestSignal = Mutex<AsyncStream<Void>.Continuation?>(nil)
    /// What `GET /api/fleet` lists as paused: the state kept on the broker (contract §5), never
    /// what heartbeats claim, which anyone on the vhost can forge. `ownMarkers`: this instance's
    /// bundles whose marker was last read present (`reconcile`); `othersMarkers`: the bundles
    /// other live instances report paused whose marker the last beat found (`applyStoredPauses`).
    private let pausedOnBroker = Mutex((ownMarkers: Set<String>(), othersMarkers: Set<String>()))
    /// The most markers of bundles this instance does not run that one beat reads (those live
    /// instances report paused): a forged claim of a million paused bundles costs this many
    /// passive declares an interval, and the rest are not listed.
    static var maxClaimedPauseChecks: Int { 100 }

    public init(
        broker: Broker, worker: any FleetMember, identity: Identity, interval: Duration, logger: Logger,
        clock: any ConsumerClock = SystemConsumerClock()
    ) {
        self.broker = broker
        self.clock = clock
        self.worker = worker
        self.identity = identity
        self.view = Mutex(FleetView(reservedFor: identity.instanceID))
        self.interval = interval
        var logger = logger
        logger[metadataKey: "fleet.instance"] = "\(identity.instanceID)"
        self.logger = logger
    }

    /// Reads every bundle's pause marker and pauses or resumes the bundle to match; then reads
    /// the markers of the bundles other live instances report paused, for the fleet's list.
    public func applyStoredPauses() async throws {
        let configured = Set(worker.bundleIDs)
        for bundleID in configured.sorted() { try await reconcile(bundleID) }
        var found = Set<String>()
        for bundleID in Self.claimedPauses(view.withLock { $0.live(now: clock.wallTime) }, excluding: configured)
        where try await FleetControl.isPaused(bundleID, on: broker) {
            found.insert(bundleID)
        }
        pausedOnBroker.withLock { $0.othersMarkers = found }
    }

    /// The bundles `live` instances report paused that are not `configured` here and could name
    /// a marker, at most `maxClaimedPauseChecks` of them, by name.
    static func claimedPauses(_ live: [FleetInstance], excluding configured: Set<String>) -> [String] {
        var claimed = Set<String>()
        for instance in live {
            for (bundleID, bundle) in instance.bundles where bundle.paused && !configured.contains(bundleID) && FleetTopology.isPausable(bundleID) {
                claimed.insert(bundleID)
            }
        }
        return Array(claimed.sorted().prefix(maxClaimedPauseChecks))
    }

    /// The bundles paused fleet-wide as the broker keeps them (their markers, as last read).
    func pausedBundles() -> [String] {
        let configured = Set(worker.bundleIDs)
        let (own, others) = pausedOnBroker.withLock { ($0.ownMarkers, $0.othersMarkers) }
        return own.intersection(configured).union(others.subtracting(configured)).sorted()
    }

    public var wallTime: Date { clock.wallTime }

    /// What `GET /api/fleet` answers and the page shows.
    public func report(now: Date) -> FleetReport {
        let instances = view.withLock { $0.live(now: now) }
        return FleetReport(instances: instances, paused: pausedBundles(), dropped: view.withLock(\.dropped))
    }

    /// One page of `GET /api/fleet` (`FleetPage`): the live instances are copied out of the
    /// view (each shares its bundles' storage), the JSON is made outside the lock.
    public func page(_ request: FleetPage.Request, now: Date) -> FleetPage {
        let (instances, dropped) = view.withLock { ($0.live(now: now), $0.dropped) }
        return FleetPage(live: instances, paused: pausedBundles(), dropped: dropped, request: request)
    }

    /// The graph's points, fleet-wide: made under the lock (a fixed number of buckets), so the
    /// view is not shared with a reader and the listener's next heartbeat copies nothing.
    public func series(now: Date) -> [FleetRates.Point] { view.withLock { $0.rates.series(now: now) } }

    /// The fleet view as it stands (totals, rates), for the page.
    public func snapshot() -> FleetView { view.withLock { $0 } }

    /// Pauses (or resumes) a bundle fleet-wide from this instance (the admin routes); this
    /// instance's own pipeline follows at once, the others when the control message arrives.
    public func setPaused(_ bundleID: String, _ paused: Bool) async throws {
        if paused {
            try await FleetControl.pause(bundleID, on: broker)
        } else {
            try await FleetControl.resume(bundleID, on: broker)
        }
        try await reconcile(bundleID)
    }

    public func run() async throws {
        let queue = TopologyNames.fleetQueue(instanceID: identity.instanceID)
        // Remembered by the connection: declared again, and the consumer restored, after a reconnect.
        try await broker.declareWaitingForTheBroker(FleetTopology.plan(instanceID: identity.instanceID, messageTTL: interval * 3), logger: logger)
        let consumer = try await broker.consume(queue: queue, prefetch: FleetControl.listenerPrefetch, maxBodySize: FleetMessage.maxBodyBytes)
        logger.info("fleet: announcing this instance", metadata: ["amqp.queue": "\(queue)", "fleet.interval": "\(interval)"])
        // Graceful shutdown and cancellation end it alike: cancelling the consumer is what ends
        // the listener's sequence, and the beats end with it. The cancel awaits the broker, so
        // a child task waits for either (no unstructured task from a synchronous handler).
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await self.beat() }
            let (requested, signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
            self.pauseRequestSignal.withLock { $0 = signal }
            group.addTask { await self.reconcileRequested(requested) }
            group.addTask {
                try? await gracefulShutdown()
                await consumer.cancel()
            }
            try await self.listen(consumer)
            group.cancelAll()
        }
    }

    private func listen(_ consumer: Broker.Consumer) async throws {
        for try await delivery in consumer {
            switch FleetMessage.decode(delivery.message.body) {
            case .heartbeat(let instance):
                let admission = view.withLock { $0.received(instance, at: clock.wallTime) }
                noteDropped(admission)
            case .pause(let bundleID), .resume(let bundleID):
                // The marker is the truth (the message may be late, or from anyone on the vhost).
                if worker.bundleIDs.contains(bundleID) {
                    pauseRequests.withLock { _ = $0.insert(bundleID) }
                    pauseRequestSignal.withLock { $0 }?.yield()
                }
            case nil:
                view.withLock { $0.ignoredMessage() }
                noteDropped(.ignored)
            }
            await broker.ack(delivery)
        }
    }

    /// Until cancelled: reads the marker of each bundle a pause or resume message named, once
    /// per wake-up however many messages named it. A message that arrives while its bundle's
    /// marker is being read adds the bundle again, so the marker is read after it too.
    private func reconcileRequested(_ requested: AsyncStream<Void>) async {
        for await _ in requested {
            let bundles = pauseRequests.withLock { requests in
                defer { requests = [] }
                return requests
            }
            for bundleID in bundles.sorted() {
                do { try await reconcile(bundleID) } catch {
                    logger.warning("fleet: could not read a pause marker", metadata: ["apns.bundle": "\(bundleID)", "amqp.error": "\(error)"])
                }
            }
        }
    }

    /// One loud line per kind for the life of the process (a forger must not flood the log);
    /// the counts go on in `GET /api/fleet`'s `dropped`.
    private func noteDropped(_ admission: FleetView.Admission) {
        let line: String
        var metadata: Logger.Metadata = [:]
        switch admission {
        case .kept: return
        case .ignored:
            line = "fleet: ignored a message on apns.fleet that is not a well-formed fleet message (counted in GET /api/fleet dropped.ignored; logged once)"
        case .droppedInstance:
            line = "fleet: view full, a new instance was not kept (counted in GET /api/fleet dropped.instances; logged once)"
            metadata["fleet.max_instances"] = "\(FleetView.maxInstances)"
            metadata["fleet.max_bytes"] = "\(FleetView.maxBytes)"
        case .keptDroppingBundles(let count):
            line = "fleet: a heartbeat carried more bundles than the view keeps, the rest were not kept (counted in GET /api/fleet dropped.bundles; logged once)"
            metadata["fleet.max_bundles"] = "\(FleetView.maxBundlesPerInstance)"
            metadata["fleet.max_bytes"] = "\(FleetView.maxBytes)"
            metadata["fleet.dropped"] = "\(count)"
        }
        guard droppedLogged.withLock({ $0.insert(line).inserted }) else { return }
        logger.warning("\(line)", metadata: metadata)
    }

    /// Until told to stop (`Periodic`): graceful shutdown, or the listener's end.
    private func beat() async {
        await Periodic.run(every: interval, on: clock, start: .now) {
            do {
                try await publishHeartbeat()
                try await applyStoredPauses()
            } catch {
                // The connection reconnects by itself; the next beat tries again.
                logger.debug("fleet: heartbeat not sent", metadata: ["amqp.error": "\(error)"])
            }
            let gone = view.withLock { $0.expire(now: clock.wallTime) }
            if !gone.isEmpty { logger.notice("fleet: instances went silent", metadata: ["fleet.gone": "\(gone)"]) }
        }
    }

    func publishHeartbeat() async throws {
        let status = worker.status()
        var bundles: [String: FleetInstance.Bundle] = [:]
        for bundle in status.bundles {
            let jobs = { (end: JobEnd) in bundle.activity.jobs[end.label, default: 0] }
            bundles[bundle.bundleID] = FleetInstance.Bundle(
                delivered: jobs(.delivered), invalidToken: jobs(.invalidToken), retry: jobs(.retry), dead: jobs(.dead),
                gated: jobs(.gated), inFlight: bundle.activity.inFlight, held: bundle.held,
                paused: bundle.paused, connections: bundle.connections,
                lastTakenPublishedAt: worker.lastTakenPublishedAt(bundle.bundleID))
        }
        let instance = FleetInstance(
            id: identity.instanceID, host: identity.host, pid: identity.pid, version: identity.version,
            startedAt: identity.startedAt, rssBytes: ProcessUsage.residentBytes(), cpuSeconds: ProcessUsage.cpuSeconds(),
            broker: status.broker, heartbeatInterval: Double(interval.milliseconds) / 1000, bundles: bundles)
        var message = FleetControl.control(.heartbeat(instance))
        let (body, leftOut) = FleetMessage.heartbeatBody(instance)
        message.body = body
        if leftOut > 0, droppedLogged.withLock({ $0.insert("heartbeat too large").inserted }) {
            logger.warning(
                "fleet: this instance's heartbeat would pass 64 KiB; it leaves out its last bundles by ID (logged once)",
                metadata: ["fleet.left_out": "\(leftOut)", "fleet.max_bytes": "\(FleetMessage.maxBodyBytes)"])
        }
        // Nobody wants a heartbeat older than the listeners' patience.
        message.properties.expiration = "\((interval * 3).milliseconds)"
        try await broker.publish(message)
    }

    /// Reads the bundle's pause marker and pauses or resumes its pipeline to match.
    func reconcile(_ bundleID: String) async throws {
        guard worker.bundleIDs.contains(bundleID) else { return }
        let ticket = pauseChecks.withLock { checks in
            checks.next += 1
            return checks.next
        }
        try await FleetControl.followMarker(
            of: bundleID, on: broker, logger: logger,
            admit: { paused in
                let newest = pauseChecks.withLock { checks in
                    guard ticket > checks.applied[bundleID, default: 0] else { return false }
                    checks.applied[bundleID] = ticket
                    return true
                }
                if newest {
                    pausedOnBroker.withLock { markers in
                        if paused { markers.ownMarkers.insert(bundleID) } else { markers.ownMarkers.remove(bundleID) }
                    }
                }
                return newest
            },
            setPaused: { worker.setPaused(bundleID, $0) })
    }
}
