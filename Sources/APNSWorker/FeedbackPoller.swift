/// Polls Apple's legacy feedback service for one binary bundle and publishes every token it
/// reports to `apns.feedback` (contract §1, §4), as the same event the worker publishes for a
/// dead token (`OutcomeRouter.feedbackServiceEvent`). The service forgets what it served, so a
/// tuple whose publish failed is kept in memory and published again before the next fetch, up
/// to `maximumUnpublished`.
import AMQPClient
import APNSBinaryProtocol
import APNSModel
import APNSTransport
import Logging
import ServiceClock
import ServiceLifecycle

public struct FeedbackPoller<Publisher: ConfirmedPublishing>: Service {
    /// Where the tuples come from: `BinaryFeedbackClient.fetch` in production.
    public typealias Fetch = @Sendable () async throws -> [FeedbackTuple]

    public let bundleID: String
    /// Between the end of one poll and the start of the next; the first poll is at start.
    public let interval: Duration
    private let fetch: Fetch
    private let broker: Publisher
    private let logger: Logger
    /// Told of every tuple (the registry marks the device invalid); never blocks.
    public var observer: (any JobEndObserver)?
    /// Tuples kept for a broker that keeps refusing them, across intervals; past it the oldest
    /// are dropped and logged (each fetch adds up to `FeedbackStreamDecoder.defaultMaximumTuples`).
    public var maximumUnpublished = FeedbackStreamDecoder.defaultMaximumTuples
    /// The interval's time.
    public var clock: any ConsumerClock = SystemConsumerClock()

    public init(bundleID: String, interval: Duration, broker: Publisher, logger: Logger, fetch: @escaping Fetch) {
        self.bundleID = bundleID
        self.interval = interval
        self.broker = broker
        self.fetch = fetch
        var logger = logger
        logger[metadataKey: "apns.bundle"] = "\(bundleID)"
        self.logger = logger
    }

    public init(bundleID: String, interval: Duration, client: BinaryFeedbackClient, broker: Publisher, logger: Logger) {
        self.init(bundleID: bundleID, interval: interval, broker: broker, logger: logger) { try await client.fetch() }
    }

    public func run() async throws {
        await run(until: nil)
    }

    /// Polls until graceful shutdown, cancellation or `stop` (`FeedbackPollers` stops one
    /// poller alone on a reload). Graceful shutdown and `stop` wait for the poll under way, whose
    /// tuples the service served only once, so it publishes them first; cancellation (the
    /// service itself stopped at once) cuts it short.
    public func run(until stop: StopSignal?) async {
        var unpublished: [FeedbackTuple] = []
        await Periodic.run(every: interval, on: clock, start: .now, until: stop) {
            unpublished = await poll(unpublished: unpublished)
        }
        if !unpublished.isEmpty {
            logger.error(
                "feedback tokens not published before the poller stopped are lost (the service served them once)",
                metadata: ["feedback.lost": "\(unpublished.count)"])
        }
    }

    /// One round: publishes `unpublished` and whatever the service reports now; returns the
    /// tuples whose publish failed.
    func poll(unpublished: [FeedbackTuple]) async -> [FeedbackTuple] {
        var tuples = unpublished
        do {
            let fetched = try await fetch()
            tuples += fetched
            for tuple in fetched {
                observer?.tokenInvalid(
                    bundleID: bundleID, token: DeviceToken(bytes: tuple.deviceToken), reason: APNSReason.unregistered.rawValue,
                    timestamp: Int64(tuple.timestamp) * 1000)
            }
            logger.debug("feedback service polled", metadata: ["feedback.tuples": "\(fetched.count)"])
        } catch {
            logger.warning("feedback service poll failed; trying again at the next interval", metadata: ["error": "\(error)"])
        }
        if tuples.count > maximumUnpublished {
            let dropped = tuples.count - maximumUnpublished
            tuples.removeFirst(dropped)
            logger.error(
                "more feedback tokens waiting for the broker than are kept; the oldest are lost",
                metadata: ["feedback.dropped": "\(dropped)", "feedback.kept": "\(tuples.count)"])
        }
        guard !tuples.isEmpty else { return [] }

        let bundleID = self.bundleID
        let broker = self.broker
        let failed = await withTaskGroup(of: FeedbackTuple?.self) { group in
            // Confirms are pipelined: publish all at once, then collect the failures.
            for tuple in tuples {
                group.addTask {
                    do {
                        try await broker.publish(OutcomeRouter.feedbackServiceEvent(bundleID: bundleID, tuple))
                        return nil
                    } catch {
                        return tuple
                    }
                }
            }
            var failed: [FeedbackTuple] = []
            for await tuple in group { if let tuple { failed.append(tuple) } }
            return failed
        }
        let published = tuples.count - failed.count
        if published > 0 {
            logger.info("feedback service tokens published", metadata: ["feedback.published": "\(published)"])
        }
        if !failed.isEmpty {
            logger.warning(
                "could not publish feedback service tokens; kept for the next interval", metadata: ["feedback.unpublished": "\(failed.count)"])
        }
        return failed
    }
}
