import APNSModel
import Foundation
import Logging
import Metrics
import ServiceClock
import ServiceLifecycle
import Synchronization

/// The pipeline's `JobEndObserver` when a registry is configured: counts and invalid-token marks
/// go into bounded in-memory buffers (never blocking the caller), and `run()` writes them to
/// PostgreSQL every `flushInterval`. While the registry is down they wait; a batch whose write
/// failed is kept for the next flush, except a mark or count PostgreSQL refuses a value of, which
/// is dropped and logged so it cannot hold back the others (counts: `+Counts.swift`). Marks
/// beyond `maxPendingMarks` are dropped (oldest first) and the drop is logged: Apple reports the
/// token again on its next job.
public final class RegistryRecorder: JobEndObserver, Service {
    struct Buffers {
        var counts = CountAggregator()
        var marks: [InvalidMark] = []
        var droppedMarks = 0
    }

    let store: RegistryStore
    let flushInterval: Duration
    let maxPendingMarks: Int
    let logger: Logger
    private let buffers = Mutex(Buffers())
    /// The flush interval's time and the counts' and marks' wall-clock time.
    private let clock: any ConsumerClock
    /// `/metrics`: this instance's group-job notifications sent at once, merged into a trailing
    /// push, and trailing pushes sent (the counts table holds the fleet's).
    private let groupNotifications: [JobEnd: Counter]

    public init(
        store: RegistryStore, flushInterval: Duration, maxPendingMarks: Int = 100_000, logger: Logger,
        clock: any ConsumerClock = SystemConsumerClock()
    ) {
        self.store = store
        self.flushInterval = flushInterval
        self.maxPendingMarks = maxPendingMarks
        self.logger = logger
        self.clock = clock
        groupNotifications = Dictionary(
            uniqueKeysWithValues: JobEnd.groupEnds.compactMap { end in
                end.contractName.map { (end, Counter(label: "apns_registry_group_notifications_total", dimensions: [("kind", $0)])) }
            })
    }

    public func jobEnded(bundleID: String, end: JobEnd) {
        count(bundleID: bundleID, end: end, count: 1)
    }

    /// Adds `count` ends at once (a group job's fan-out).
    public func count(bundleID: String, end: JobEnd, count: Int64) {
        let seconds = Int64(clock.wallTime.timeIntervalSince1970)
        groupNotifications[end]?.increment(by: count)
        buffers.withLock { $0.counts.add(bundleID: bundleID, end: end, epochSeconds: seconds, count: count) }
    }

    public func tokenInvalid(bundleID: String, token: DeviceToken, reason: String, timestamp: Int64?) {
        let at = timestamp ?? Int64(clock.wallTime.timeIntervalSince1970 * 1000)
        let mark = InvalidMark(bundleID: bundleID, token: token.hex, reason: reason, at: at)
        buffers.withLock { buffers in
            if buffers.marks.count >= maxPendingMarks {
                buffers.marks.removeFirst()
                buffers.droppedMarks += 1
            }
            buffers.marks.append(mark)
        }
    }

    /// Marks and count keys waiting to be written (admin page, tests).
    public var pending: (marks: Int, countKeys: Int) {
        buffers.withLock { ($0.marks.count, $0.counts.counts.count) }
    }

    public func run() async throws {
        await Periodic.run(every: flushInterval, on: clock, start: .afterInterval) { _ = await self.flush() }
        // Told to stop: one last write, so a SIGTERM loses nothing.
        await flush()
    }

    /// Writes what is buffered; returns whether everything was written.
    @discardableResult
    public func flush() async -> Bool {
        let (counts, marks, dropped) = buffers.withLock { buffers in
            defer {
                buffers.marks = []
                buffers.droppedMarks = 0
            }
            return (buffers.counts.take(), buffers.marks, buffers.droppedMarks)
        }
        if dropped > 0 {
            logger.error("invalid-token marks dropped: the registry was down too long", metadata: ["registry.dropped_marks": "\(dropped)"])
        }
        var ok = true
        let unwritten = await write(marks)
        if !unwritten.isEmpty {
            ok = false
            buffers.withLock { buffers in
                buffers.marks.insert(contentsOf: unwritten, at: 0)
                let excess = buffers.marks.count - maxPendingMarks
                if excess > 0 {
                    buffers.marks.removeFirst(excess)
                    buffers.droppedMarks += excess
                }
            }
        }
        let unwrittenCounts = await writeCounts(counts)
        if !unwrittenCounts.isEmpty {
            ok = false
            buffers.withLock { $0.counts.merge(unwrittenCounts) }
        }
        return ok
    }

    /// Writes `marks`; returns those to keep for the next flush (the registry could not answer).
    /// A value PostgreSQL refuses in one mark must not hold back the others for ever:
    /// the batch is then written mark by mark, each refused mark is dropped and logged with
    /// PostgreSQL's reason, and the rest are applied.
    private func write(_ marks: [InvalidMark]) async -> [InvalidMark] {
        do {
            try await store.markInvalid(marks)
            if !marks.isEmpty { logger.info("devices marked invalid", metadata: ["registry.marks": "\(marks.count)"]) }
            return []
        } catch {
            guard RegistryStore.refusedValue(error) != nil else {
                logger.debug("invalid marks kept for the next flush", metadata: ["error": "\(error)"])
                return marks
            }
        }
        var written = 0
        for (index, mark) in marks.enumerated() {
            do {
                try await store.markInvalid([mark])
                written += 1
            } catch {
                guard let refused = RegistryStore.refusedValue(error) else {
                    logger.debug("invalid marks kept for the next flush", metadata: ["error": "\(error)"])
                    return Array(marks[index...])
                }
                logger.error(
                    "invalid-token mark dropped: PostgreSQL refused a value of it",
                    metadata: [
                        "apns.bundle": "\(mark.bundleID)", "apns.token": "\(DeviceToken(hex: mark.token)?.redacted ?? "-")",
                        "registry.reason": "\(String(mark.reason.prefix(100)).debugDescription)", "error": "\(refused)",
                    ])
            }
        }
        if written > 0 { logger.info("devices marked invalid", metadata: ["registry.marks": "\(written)"]) }
        return []
    }
}
