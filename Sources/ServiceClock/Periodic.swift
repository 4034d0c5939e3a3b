import ServiceLifecycle

/// Work done again and again, an interval apart: the one form of every periodic loop in the
/// service (the registry's flush and trailing pushes, the fleet's heartbeat, the feedback
/// poll, the configuration's watch, the transport's idle check, the simulator's summary).
///
/// The one exit rule: the loop ends when its task is told to stop, by graceful shutdown
/// (swift-service-lifecycle) or by cancellation, whichever comes first; the wait between two
/// rounds is cut short by either. Both, because these loops run in both places: as a
/// `Service`, stopped by graceful shutdown (SIGTERM), and as a child task of a service, ended
/// by cancellation when its parent is done. A loop stopped alone while its siblings go on (a
/// feedback poller on a reload) is also given its own `StopSignal`, which it obeys as it does
/// graceful shutdown. A round under way is not cut short here: it sees graceful shutdown and a
/// stop signal only after it ended, and cancellation as its own code does (a cancelled task's
/// waits throw). What must happen once at the end (a last flush) is the caller's, after `run`
/// returns.
///
/// Time is the injected `ConsumerClock`, so a test moves a manual clock instead of waiting
/// the interval out.
public enum Periodic {
    /// When the first round runs.
    public enum Start: Sendable {
        /// At once, then every interval.
        case now
        /// One interval after the start.
        case afterInterval
    }

    /// Whether the current task was told to stop: the exit rule, for a round that loops within
    /// itself (a backlog drained page by page) to stop where the periodic loop would.
    public static var stopRequested: Bool { Task.isCancelled || Task.isShuttingDownGracefully }

    /// Runs `round` every `interval` on `clock`, the first one as `start` says, until the task
    /// is told to stop, or `stop` is.
    public static func run(
        every interval: Duration, on clock: any ConsumerClock, start: Start, until stop: StopSignal? = nil,
        _ round: () async -> Void
    ) async {
        if start == .afterInterval, !(await wait(interval, on: clock, until: stop)) { return }
        while !stopRequested(stop) {
            await round()
            guard await wait(interval, on: clock, until: stop) else { return }
        }
    }

    private static func stopRequested(_ stop: StopSignal?) -> Bool { stopRequested || stop?.isStopped == true }

    /// Sleeps `interval`; false when the task or `stop` was told to stop first or meanwhile.
    private static func wait(_ interval: Duration, on clock: any ConsumerClock, until stop: StopSignal?) async -> Bool {
        guard !stopRequested(stop) else { return false }
        do {
            if let stop {
                try await cancelWhenGracefulShutdown { try await stop.cancelling { try await clock.sleep(for: interval) } }
            } else {
                try await cancelWhenGracefulShutdown { try await clock.sleep(for: interval) }
            }
        } catch {
            return false
        }
        return !stopRequested(stop)
    }
}
