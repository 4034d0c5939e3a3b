/// The soak while it runs: the publisher's steady stream, the schedule's events carried out, a
/// sample every `sampleEvery`, and the ends jobs reach at the broker (dead queues, feedback)
/// collected as they happen. `SoakBench` sets it up and judges it.
import AMQPClient
import APNSModel
import APNSSimulator
import APNSSoak
import APNSTopologyNames
import APNSWorkerClient
import Foundation
import Synchronization

/// What the run's tasks share.
struct SoakState: Sendable {
    var ledger = JobLedger()
    var dead: [String: String] = [:]
    var feedback: Set<String> = []
    /// Messages found in `apns.unrouted` and `apns.feedback.unrouted`: "queue: id".
    var unrouted: [String] = []
    var faults = SimulatorFaults.none
    var reloads = 0
    var restarts = 0
    var eventsDone = 0
    var counts: [SoakAction: Int] = [:]
    var lastEventEnded: Duration = .zero
    var problems: [String] = []
    var samples: [SoakSample] = []
}

final class SoakRun: Sendable {
    let schedule: SoakSchedule
    let sampleEvery: Duration
    let rate: Int
    let bundles: [String]
    let broker: SoakBroker
    let simulator: APNSSimulator
    let worker: SoakWorker
    let connection: AMQPConnection
    let sampler: SoakSampler
    let output: SoakOutput
    /// Rewrites the worker's configuration for a number of reloads done.
    let writeConfiguration: @Sendable (Int) throws -> Void
    /// Broker stops are `kill -9`s of the node (`--kill-broker`).
    let killBroker: Bool
    let state = Mutex(SoakState())
    let started = ContinuousClock.now

    /// The bundle the operator pauses, the one whose `.voip` topic is refused.
    var pausedBundle: String { bundles[1] }
    var voipBundle: String { bundles[0] }
    static let voipToken = String(repeating: "7e", count: 32)

    init(
        schedule: SoakSchedule, sampleEvery: Duration, rate: Int, bundles: [String], broker: SoakBroker, simulator: APNSSimulator,
        worker: SoakWorker, connection: AMQPConnection, sampler: SoakSampler, output: SoakOutput, killBroker: Bool = false,
        writeConfiguration: @escaping @Sendable (Int) throws -> Void
    ) {
        self.killBroker = killBroker
        self.schedule = schedule
        self.sampleEvery = sampleEvery
        self.rate = rate
        self.bundles = bundles
        self.broker = broker
        self.simulator = simulator
        self.worker = worker
        self.connection = connection
        self.sampler = sampler
        self.output = output
        self.writeConfiguration = writeConfiguration
    }

    var elapsed: Duration { started.duration(to: .now) }

    func note(_ problem: String) {
        output.event(elapsed, "problem: \(problem)")
        state.withLock { $0.problems.append(problem) }
    }

    // MARK: The run

    /// Until the schedule's end: publishes, carries out the events, samples; throws when the
    /// worker process ends.
    func run() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await self.publish() }
            group.addTask { await self.carryOutEvents() }
            group.addTask { await self.sampleUntilTheEnd() }
            group.addTask {
                while self.elapsed < self.schedule.duration {
                    if let status = self.worker.exited {
                        throw SoakError("the worker exited (status \(status)) \(Int(self.elapsed.timeInterval)) s into the run; its last lines:\n\(self.worker.logTail(20))")
                    }
                    try await Task.sleep(for: .seconds(1))
                }
            }
            try await group.waitForAll()
        }
    }

    /// `rate` jobs a second, round-robin over the bundles: one in 50 to a token APNs calls
    /// `Unregistered` (a feedback event), one in 100 not a job at all (its dead queue), the rest
    /// good. A publisher that fell behind (the broker was down) catches up.
    private func publish() async {
        let interval = Duration.seconds(1) / max(rate, 1)
        var index = 0
        while !Task.isCancelled {
            let due = started + interval * index
            guard started.duration(to: due) < schedule.duration else { return }
            if due > .now { try? await Task.sleep(until: due, clock: .continuous) }
            let job = UUID()
            let id = job.uuidString.lowercased()
            let bundle = bundles[index % bundles.count]
            // Shifted by one every hundred jobs, so that each bundle gets its share of both.
            let shift = (index / 100) % bundles.count
            if index % 100 == 37 + shift {
                await publish(id: id, bundle: bundle, body: Array("soak \(index): not a job".utf8), expecting: .deadLetter)
            } else if index % 50 == 45 + shift {
                let token = "dead" + String(format: "%060x", index)
                simulator.script(token: token, .unregistered(timestamp: Int64(Date().timeIntervalSince1970 * 1000)))
                await publish(id: id, bundle: bundle, body: Self.job(job, bundle: bundle, token: token, index: index), expecting: .feedback)
            } else {
                let token = String(format: "%064x", index)
                await publish(id: id, bundle: bundle, body: Self.job(job, bundle: bundle, token: token, index: index), expecting: .delivered)
            }
            index += 1
        }
    }

    /// A job as a sync server writes it, through the client's own encoder.
    static func job(_ id: UUID, bundle: String, token: String, index: Int, pushType: PushType? = nil) -> [UInt8] {
        NotificationJob(bundleID: bundle, token: token, payload: .alert("soak \(index)"), options: DeliveryOptions(pushType: pushType), id: id).body()
    }

    /// Publishes until the broker confirms (the broker may be restarting); a job whose publish
    /// may have reached the queue before it failed is marked as possibly there twice.
    private func publish(id: String, bundle: String, body: [UInt8], expecting end: ExpectedEnd) async {
        var properties = AMQPProperties.persistentJSON
        properties.messageID = id
        let message = AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: bundle, body: body, properties: properties)
        var ambiguous = false
        let giveUp = ContinuousClock.now + .seconds(180)
        while true {
            do {
                try await connection.publish(message)
                break
            } catch {
                let code = (error as? AMQPError)?.code
                if code != .notConnected, code != .closed { ambiguous = true }
                guard ContinuousClock.now < giveUp, !Task.isCancelled else {
                    note("job \(id) could not be published for 3 minutes: \(error)")
                    return
                }
                try? await Task.sleep(for: .milliseconds(300))
            }
        }
        state.withLock { state in
            state.ledger.published(id, expecting: end, origin: "\(bundle), published \(Int(elapsed.timeInterval)) s into the run\(ambiguous ? ", twice" : "")")
            if ambiguous { state.ledger.publishedAgain(id) }
        }
    }

    private func carryOutEvents() async {
        for event in schedule.events where !Task.isCancelled {
            let due = started + event.at
            if due > .now { try? await Task.sleep(until: due, clock: .continuous) }
            let began = elapsed
            await perform(event.action)
            let ended = elapsed
            output.event(began, "cycle \(event.cycle): \(event.action.rawValue) (\(String(format: "%.1f", (ended - began).timeInterval)) s)")
            state.withLock { state in
                state.eventsDone += 1
                state.counts[event.action, default: 0] += 1
                state.lastEventEnded = ended
            }
        }
    }

    func perform(_ action: SoakAction) async {
        switch action {
        case .refuseKey: changeFaults { $0.rejectAllTokens = .invalidProviderToken }
        case .allowKey: changeFaults { $0.rejectAllTokens = nil }
        case .refuseTopic:
            simulator.script(token: Self.voipToken, .always(status: 400, reason: .topicDisallowed))
            let job = UUID()
            let body = Self.job(job, bundle: voipBundle, token: Self.voipToken, index: -1, pushType: .voip)
            await publish(id: job.uuidString.lowercased(), bundle: voipBundle, body: body, expecting: .delivered)
        case .allowTopic: simulator.script(token: Self.voipToken, .accept)
        case .pause, .resume:
            if let problem = await worker.fleetCommand(action == .pause ? "pause" : "resume", bundle: pausedBundle, url: broker.url) {
                note(problem)
            }
        case .reload:
            let reloads = state.withLock { state in
                state.reloads += 1
                return state.reloads
            }
            do {
                try writeConfiguration(reloads)
                worker.reload()
            } catch {
                note("the configuration could not be written: \(error)")
            }
        case .stopBroker: if killBroker { await broker.kill() } else { await broker.stop() }
        case .startBroker:
            // A node that does not come back is the machine's trouble, not the worker's: tried
            // again, and said; the jobs then wait and the drain tells what that cost.
            for attempt in 1...3 {
                guard let problem = await broker.start() else { break }
                note("the broker did not start again (attempt \(attempt)): \(problem.suffix(300))")
            }
            state.withLock { $0.restarts += 1 }
        case .goaway:
            changeFaults {
                $0.goawayAfterStreams = 10
                $0.dropAfterStreams = nil
            }
        case .dropConnections:
            changeFaults {
                $0.goawayAfterStreams = nil
                $0.dropAfterStreams = 10
            }
        case .healAPNs:
            changeFaults {
                $0.goawayAfterStreams = nil
                $0.dropAfterStreams = nil
            }
        }
    }

    private func changeFaults(_ change: (inout SimulatorFaults) -> Void) {
        let faults = state.withLock { state in
            change(&state.faults)
            return state.faults
        }
        simulator.setFaults(faults)
    }

    // MARK: Samples

    private func sampleUntilTheEnd() async {
        var index = 0
        while !Task.isCancelled {
            let at = sampleEvery * index
            guard at < schedule.duration else { return }
            let due = started + at
            if due > .now { try? await Task.sleep(until: due, clock: .continuous) }
            var sample = await sampler.sample()
            sample.seconds = at.timeInterval
            sample.cycle = schedule.cycleIndex(at: at)
            sample.phase = schedule.phase(at: at)
            sample.epoch = schedule.epoch(at: at)
            sample.delivered = simulator.counters().accepted
            let dueEvents = schedule.events.filter { $0.at <= at }.count
            sample = state.withLock { state in
                sample.published = state.ledger.count
                // Judged only when the events due were carried out (a slow broker restart
                // delays those after it) and the worker reports its broker connection.
                sample.judged = schedule.isJudged(at: at) && state.eventsDone == dueEvents && sample.brokerConnected
                state.samples.append(sample)
                return sample
            }
            output.sample(sample)
            index += 1
        }
    }

    // MARK: Ends seen at the broker

    /// What a collected queue holds.
    enum Collected: Sendable {
        /// A bundle's dead queue: an end.
        case dead
        /// The soak's queue bound to `apns.feedback`: an end.
        case feedback
        /// `apns.unrouted` or `apns.feedback.unrouted`: no end, and no message of the soak's
        /// should ever be there (every bundle it publishes to keeps its queue and binding).
        case unrouted
    }

    /// Consumes `queue` for the whole run, riding broker restarts, and records each message's job.
    func collect(queue: String, _ kind: Collected) async {
        while !Task.isCancelled {
            do {
                let consumer = try await connection.consume(queue: queue, prefetch: 100)
                for try await delivery in consumer {
                    let message = delivery.message
                    let body = (try? JSONSerialization.jsonObject(with: Data(message.body))) as? [String: Any]
                    state.withLock { state in
                        switch kind {
                        case .feedback:
                            if let id = body?["jobId"] as? String { state.feedback.insert(id.lowercased()) }
                        case .dead:
                            let id = message.properties.messageID ?? (body?["id"] as? String) ?? "(no id)"
                            state.dead[id.lowercased()] = message.properties.headers?[JobHeaders.reason]?.stringValue ?? ""
                        case .unrouted:
                            let id = message.properties.messageID ?? (body?["id"] as? String) ?? (body?["jobId"] as? String) ?? "(no id)"
                            state.unrouted.append("\(queue): \(id.lowercased()) (routing key \(message.routingKey))")
                        }
                    }
                    connection.ackNow(delivery)
                }
            } catch {
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// What has been seen at each end so far.
    func seen() -> JobLedger.Seen {
        let delivered = simulator.accepted().map(\.apnsID)
        return state.withLock { JobLedger.Seen(delivered: delivered, dead: $0.dead, feedback: $0.feedback) }
    }
}

extension SoakRun {
    /// At the end of the events: APNs accepts everything again, the paused bundle resumes, a
    /// stopped broker starts, and a removed spare bundle is configured again.
    func undoEverything() async {
        changeFaults { $0 = .none }
        simulator.script(token: Self.voipToken, .accept)
        await perform(.resume)
        let (stopped, started, reloads) = state.withLock { ($0.counts[.stopBroker] ?? 0, $0.counts[.startBroker] ?? 0, $0.reloads) }
        if stopped > started { await perform(.startBroker) }
        if !SoakSchedule.configuration(afterReloads: reloads).spareConfigured { await perform(.reload) }
        output.event(elapsed, "end of the events: everything undone; draining")
    }
}
