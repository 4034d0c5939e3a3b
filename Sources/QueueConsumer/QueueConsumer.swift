import AMQPClient
import CancellableWait
import Foundation
import ServiceClock
import ServiceLifecycle
import Synchronization

/// The shell of one queue consumer: carries out what its `ConsumerStateMachine` decides, with
/// the per-message work behind `ConsumerWork`. Users: every bundle's pipeline, the registry's
/// registration and group consumers (`docs/architecture.md`, "One queue consumer").
///
/// Execution model:
/// - **the control loop** (`run()`) is the only code that awaits the broker for the consumer's
///   own state: it starts and cancels the consumer, takes a held consumer's probe, and sleeps for
///   the machine's timers, each in a child task of `run()`'s task group. It wakes only on mail
///   from the machine's actions, never to poll;
/// - **the consumer task** (a child of `run()`) reads deliveries and starts each in turn;
/// - **the settle runner** (a child of `run()`): work that must await something after its start
///   (a confirmed publish, a database) is mailed with `settleLater` and runs as a child task of
///   it, so no settle outlives `run()`: at the shutdown deadline they are cancelled with it;
/// - the work's synchronous ends (`answered`, `settled`) may come from any thread (a
///   transport's event loop) and never block.
///
/// The machine sits under one lock, taken a few times per job, never across a suspension.
package final class QueueConsumer<Work: ConsumerWork>: Sendable {
    package typealias Machine = ConsumerStateMachine<CheckedContinuation<Bool, Never>, ContinuousClock.Instant>
    package typealias Settle = @Sendable () async -> Void

    /// What the machine's actions ask of the control loop.
    private enum Mail: Sendable {
        case control(Machine.Control, timer: ContinuousClock.Instant?)
        /// A timer went off.
        case tick
    }

    /// The time of the breaker, the probes, the shutdown deadline and the work's timings.
    package let clock: any ConsumerClock
    /// The consumer's whole state: hold breaker, pause, consumer, jobs in flight, shutdown.
    let machine: Mutex<Machine>
    private let announce: @Sendable (Machine.News) -> Void
    private let mail: AsyncStream<Mail>
    private let mailbox: AsyncStream<Mail>.Continuation
    private let settles: AsyncStream<Settle>
    private let settleBox: AsyncStream<Settle>.Continuation
    /// Numbers the broker consumers started; only the newest one's end is the consumer's end
    /// (one replaced by a re-consume ends after its buffered deliveries, and that is no news).
    private let consumerNumber = Mutex(0)

    /// - Parameter announce: the machine's news, told where it happens (the work's `announce`,
    ///   given here because news comes from any thread, outside `run()`).
    package init(
        limit: Int, probeInterval: Duration, shutdownDeadline: Duration, clock: any ConsumerClock,
        announce: @escaping @Sendable (Machine.News) -> Void
    ) {
        self.clock = clock
        self.announce = announce
        machine = Mutex(Machine(limit: limit, probeInterval: probeInterval, shutdownDeadline: shutdownDeadline))
        (mail, mailbox) = AsyncStream.makeStream()
        (settles, settleBox) = AsyncStream.makeStream()
    }

    package var isHeld: Bool { machine.withLock { $0.isHeld } }
    package var isPaused: Bool { machine.withLock { $0.paused } }
    package var inFlight: Int { machine.withLock { $0.inFlight } }
    package var lastTakenPublishedAt: Date? { machine.withLock { $0.lastTakenPublishedAt } }
    /// The in-flight bound and prefetch now (the transport's window, within the work's bounds).
    package var limit: Int { machine.withLock { $0.limit } }

    /// The work's transport wants `wanted` jobs in flight: the bound follows, and the
    /// broker's prefetch by re-consuming (`ConsumerStateMachine.resize`).
    package func resize(to wanted: Int, force: Bool = false) {
        event { $0.resize(to: wanted, force: force) }
    }

    /// Pauses or resumes consuming (an operator's pause); returns whether that changed anything.
    package func setPaused(_ paused: Bool) -> Bool {
        event { $0.setPaused(paused, now: clock.now) }
    }

    /// Stops this consumer alone, as graceful shutdown would: it takes no more jobs, and `run()`
    /// returns once the jobs in flight have ended (or the shutdown deadline passed). Safe at any
    /// time, before `run()` too, and more than once.
    package func stop() {
        event { $0.shutdown(now: clock.now) }
    }

    /// A sibling's fault holds this consumer too (`ConsumerStateMachine.holdAlongside`).
    package func holdAlongside(reason: String) {
        event { $0.holdAlongside(reason: reason, now: clock.now) }
    }

    /// Consumes `work`'s queue until graceful shutdown (or cancellation). Jobs in flight at
    /// shutdown get the shutdown deadline; whatever is unacked then goes back to the broker and
    /// the settles still running are cancelled. An outage of the broker ends nothing: consumes
    /// and probes that fail are tried again (`ConsumerStateMachine.consumerFailed`). Runs once.
    package func run(_ work: Work) async throws {
        defer { settleBox.finish() }
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { await self.runSettles() }
                await control(work, &group)
                // Timers may still sleep and settles abandoned at the deadline still run.
                group.cancelAll()
            }
        } onGracefulShutdown: {
            self.event { $0.shutdown(now: self.clock.now) }
        }
    }

    // MARK: - For the work

    /// A job's work was judged (`endsAHold`: a healthy signal is proof the fault is gone,
    /// `ConsumerStateMachine.answered`); `.drop` after the shutdown deadline (settle nothing).
    package func answered(_ signal: BreakerSignal, endsAHold: Bool) -> Machine.Settlement {
        event { $0.answered(signal, endsAHold: endsAHold, now: clock.now) }
    }

    /// A job reached its end and was settled (or sent back).
    package func settled(probe: Bool) {
        event { $0.settled(probe: probe, now: clock.now) }
    }

    /// Runs `settle` as a child of `run()` (the settle runner's task group). After `run()` has
    /// returned nothing runs: the job stays unacked and the broker delivers it again.
    package func settleLater(_ settle: @escaping Settle) {
        settleBox.yield(settle)
    }

    // MARK: - The control loop

    /// Carries out the machine's control actions until it says `finish` (or the task is
    /// cancelled, which ends the mail). The consumer and the timers are child tasks of `group`.
    /// A consumer cancelled by a pause or a hold is replaced on its own channel when the
    /// consumer starts again, and at `finish` its channel is given back to the connection
    /// (closed, handing back what was abandoned at the deadline): none is left open behind.
    private func control(_ work: Work, _ group: inout ThrowingDiscardingTaskGroup<any Error>) async {
        var consumer: Work.Broker.Consumer?
        event { $0.start(now: clock.now) }
        for await mail in mail {
            switch mail {
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
                    let prefetch = machine.withLock { $0.limit }
                    do {
                        consumer = try await startConsumer(work, prefetch: prefetch, replacing: consumer, &group)
                    } catch {
                        event { $0.consumerFailed(reason: "\(error)", now: clock.now) }
                        continue
                    }
                    event { $0.consumerStarted() }
                    // The window moved while `basic.consume` was under way.
                    if machine.withLock({ $0.consumer == .consuming && $0.limit != prefetch }) {
                        consumer = await reconsume(work, replacing: consumer, &group)
                    }
                case .reconsume:
                    consumer = await reconsume(work, replacing: consumer, &group)
                case .cancelConsumer:
                    await consumer?.cancel()
                case .probe:
                    await probe(work)
                case .finish:
                    let abandoned = machine.withLock { $0.abandoned }
                    await consumer?.finish(handingBack: abandoned > 0)
                    return
                }
            }
        }
        // Cancelled: end the consumer, or the task group would wait for it forever.
        await endConsumer(consumer)
    }

    /// A broker consumer with `prefetch` (replacing `old`, if given: on its channel), and its
    /// consumer task in `group`.
    private func startConsumer(
        _ work: Work, prefetch: Int, replacing old: Work.Broker.Consumer? = nil, _ group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws -> Work.Broker.Consumer {
        // Numbered before it exists: replacing `old` ends old's sequence while `consume` is
        // still under way, and old's end must not be taken for the consumer's end.
        let (number, previous) = consumerNumber.withLock { n -> (Int, Int) in
            n += 1
            return (n, n - 1)
        }
        let started: Work.Broker.Consumer
        do {
            if let old {
                started = try await work.broker.consume(
                    replacing: old, queue: work.queue, prefetch: UInt16(clamping: prefetch), maxBodySize: work.maxBodySize,
                    oversizedDeadLetter: work.oversizedDeadLetter)
            } else {
                started = try await work.broker.consume(
                    queue: work.queue, prefetch: UInt16(clamping: prefetch), maxBodySize: work.maxBodySize,
                    oversizedDeadLetter: work.oversizedDeadLetter)
            }
        } catch {
            // Nothing replaced `old`: its end is the consumer's end again.
            consumerNumber.withLock { n in if n == number { n = previous } }
            throw error
        }
        group.addTask { await self.consume(started, work, number: number) }
        return started
    }

    /// The consumer again with the prefetch the machine's `limit` says now, replacing the old
    /// one on its channel (`MessageConsuming.consume(replacing:…)`): the old one's buffered
    /// deliveries are still taken and settled on that channel, which stays open, so nothing is
    /// lost or sent twice; what the broker sent for the old one after its cancel goes back to
    /// the queue untouched. Nothing to do unless the machine still consumes (a hold or pause
    /// mailed meanwhile cancels whichever consumer is newest). When the broker refuses, the old
    /// one is ended and the machine told of a failed consumer: it starts one again later.
    private func reconsume(
        _ work: Work, replacing old: Work.Broker.Consumer?, _ group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async -> Work.Broker.Consumer? {
        guard let old, let prefetch = machine.withLock({ $0.consumer == .consuming ? $0.limit : nil }) else { return old }
        do {
            return try await startConsumer(work, prefetch: prefetch, replacing: old, &group)
        } catch {
            // Old's end is no news now (the machine is told here, once).
            consumerNumber.withLock { $0 += 1 }
            await old.cancel()
            event { $0.consumerFailed(reason: "\(error)", now: clock.now) }
            return old
        }
    }

    private func endConsumer(_ consumer: Work.Broker.Consumer?) async {
        guard let consumer, machine.withLock({ $0.consumer != .idle }) else { return }
        await consumer.cancel()
    }

    /// The consumer task: every delivery in turn, until the consumer is cancelled. The end of
    /// one a re-consume replaced is no news to the machine.
    private func consume(_ consumer: Work.Broker.Consumer, _ work: Work, number: Int) async {
        var failure: (any Error)?
        do {
            for try await delivery in consumer { await take(delivery, work) }
        } catch {
            failure = error
        }
        guard consumerNumber.withLock({ $0 == number }) else { return }
        if let failure {
            event { $0.consumerFailed(reason: "\(failure)", now: clock.now) }
        } else {
            event { $0.consumerEnded(now: clock.now) }
        }
    }

    private func take(_ delivery: AMQPDelivery, _ work: Work) async {
        var intake = machine.withLock { $0.delivered(publishedAt: work.publishTime(of: delivery)) }
        if intake == .waitForRoom {
            let admitted = await withCancellableWait(
                register: { waiter in machine.withLock { $0.parkForRoom(waiter) }.map { $0 == .start } },
                withdraw: { self.machine.withLock { $0.cancelRoomWait() } },
                cancelled: false)
            intake = admitted ? .start : .refuse
        }
        if intake == .start {
            work.start(delivery, probe: false, on: self)
        } else {
            // Held, paused, shutting down, or sent after the cancel: back to the broker unsent.
            await work.handBack(delivery, on: self)
        }
    }

    /// A held consumer's probe: a job taken and worked like any other, or an answer of its own.
    /// One that fails (the broker lost) is tried again at the next interval.
    private func probe(_ work: Work) async {
        let probe: ConsumerProbe
        do {
            probe = try await work.probe()
        } catch {
            event { $0.probeFailed(reason: "\(error)", now: clock.now) }
            return
        }
        let result: Machine.ProbeResult
        switch probe {
        case .found(let delivery): result = .found(publishedAt: work.publishTime(of: delivery))
        case .nothing: result = .nothing
        case .healthy: result = .healthy
        }
        let intake = event { $0.probeTaken(result, now: clock.now) }
        guard case .found(let delivery) = probe else { return }
        if intake == .start {
            work.start(delivery, probe: true, on: self)
        } else {
            await work.handBack(delivery, on: self)
        }
    }

    /// The settle runner: each mailed settle in a child task, until `run()` ends.
    private func runSettles() async {
        await withDiscardingTaskGroup { group in
            for await settle in settles {
                group.addTask { await settle() }
            }
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
}
