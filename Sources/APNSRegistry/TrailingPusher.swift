import AMQPClient
import APNSModel
import APNSRegistryMessages
import Foundation
import Logging
import QueueConsumer
import ServiceClock

/// Sends the trailing pushes of contract §6 when their window ends, without a timer per device:
/// every instance polls PostgreSQL for due pushes (`window_end` passed, an index on it), claims a
/// page for `leaseMS` (`SKIP LOCKED`, so instances share the work and never take the same row),
/// publishes each as a section-2 job to `apns.jobs` with confirms, then opens the device's next
/// window (compare-and-set: a push merged or sent meanwhile is not lost). A claim whose instance
/// died runs out and the push is claimed again, so a push due while every instance was down goes
/// out when one comes back. Why a poll rather than delayed broker messages: docs/decisions.md.
///
/// It is no queue consumer (nothing is consumed: it polls), so it does not run on
/// `QueueConsumer`; its registry outage is the code base's one hold breaker (`HoldBreaker`):
/// the first failed poll holds it with one error, the first poll that succeeds ends the hold
/// with one notice. Every poll while held is the probe, at the poll interval, so it asks the
/// breaker for no probe schedule.
struct TrailingPusher<Publisher: ConfirmedPublishing>: Sendable {
    let store: RegistryStore
    let broker: Publisher
    let recorder: RegistryRecorder?
    let window: SyncWindow
    let batchSize: Int
    let leaseMS: Int64
    let logger: Logger
    /// The breaker's time.
    let clock: any ConsumerClock

    /// How long an idle poll waits: a twentieth of the window (a 30 s window's pushes go out at
    /// most about a second late), between 50 ms and 1 s.
    static func pollInterval(for window: SyncWindow) -> Duration {
        .milliseconds(min(1_000, max(50, window.isOff ? 1_000 : window.lengthMS / 20)))
    }

    func run() async {
        let interval = Self.pollInterval(for: window)
        var breaker = HoldBreaker<ContinuousClock.Instant>(probeInterval: interval)
        await Periodic.run(every: interval, on: clock, start: .now) {
            do {
                // A full page: the next one is due too, at once.
                var claimed: Int
                repeat {
                    claimed = try await pushDue()
                    if let heldFor = breaker.succeeded(now: clock.now) {
                        logger.notice("trailing pushes resume: the registry answers again", metadata: ["held.seconds": "\(heldFor.components.seconds)"])
                    }
                } while claimed == batchSize && !Periodic.stopRequested
            } catch {
                if breaker.fault("registry unavailable", now: clock.now) {
                    logger.error(
                        "trailing pushes wait: the registry (PostgreSQL) is unavailable; they go out once it answers",
                        metadata: ["error": "\(String(reflecting: error).prefix(300))"])
                }
            }
        }
    }

    /// One page: claim, publish, open the next windows. Returns how many were claimed.
    @discardableResult
    func pushDue() async throws -> Int {
        let (now, due) = try await store.claimDueTrailingPushes(limit: batchSize, leaseMS: leaseMS)
        guard !due.isEmpty else { return 0 }
        let sending = due.filter { $0.active && $0.window.trailing != nil }
        let messages = sending.map { push in
            let id = UUIDv5.fanOutJobID(groupJobID: push.window.trailing!, bundleID: push.device.bundleID, token: push.device.token)
            return jobMessage(bundleID: push.device.bundleID, id: id, body: push.body)
        }
        let results = await publishConfirmed(messages, on: broker)
        let unsent = Set(results.unconfirmed.map { sending[$0].device.position })
        // A push not confirmed keeps its claim and goes out again once the claim runs out. One
        // the client refused (a bundle ID no routing key can carry) never goes: it is done with.
        let done = due.filter { !unsent.contains($0.device.position) }
        _ = try await store.storeWindows(
            done.map { SyncWindowWrite(position: $0.device.position, window: window.afterTrailingPush($0.window, now: now), trailingBody: nil) })
        var sent: [String: Int64] = [:]
        for (index, push) in sending.enumerated() where !results.unconfirmed.contains(index) && !results.unroutable.contains(index) {
            sent[push.device.bundleID, default: 0] += 1
        }
        for (bundleID, count) in sent { recorder?.count(bundleID: bundleID, end: .trailing, count: count) }
        if !results.unconfirmed.isEmpty {
            logger.warning(
                "trailing pushes not confirmed by the broker; sent again later", metadata: ["registry.unconfirmed": "\(results.unconfirmed.count)"])
        }
        if !results.unroutable.isEmpty {
            logger.warning(
                "trailing pushes dropped: their bundle ID is longer than an AMQP routing key allows (registry rows not written by a registration message)",
                metadata: ["registry.skipped": "\(results.unroutable.count)"])
        }
        logger.debug(
            "trailing pushes sent",
            metadata: ["registry.trailing": "\(sent.values.reduce(0, +))", "registry.dropped": "\(due.count - sending.count)"])
        return due.count
    }
}
