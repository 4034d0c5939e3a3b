/// `apns-worker-bench soak`: one real `apns-worker run` for a set time against a RabbitMQ node of
/// its own and the simulator, with a steady stream of jobs to four bundles, through what a long
/// life brings, cycled (`SoakSchedule`): refused keys and topics, operator pauses, reloads that
/// add, remove and rotate, broker restarts, GOAWAYs and dropped connections. It fails (exit 1,
/// one line each) on any job lost, any good job dead-lettered, duplicates beyond the contract,
/// or any resource whose count keeps growing after the warm-up (`ResourceTrend`).
import AMQPClient
import APNSModel
import APNSSimulator
import APNSSoak
import APNSTopologyNames
import ArgumentParser
import Crypto
import Dispatch
import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

struct SoakBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak",
        abstract: "A worker through holds, pauses, reloads, broker restarts and APNs GOAWAYs, cycled: nothing lost, nothing accumulating.")

    @Option(help: "How long events are cycled, then the jobs are drained and judged: 90s, 5m, 1h.")
    var duration = "5m"

    @Option(help: "One cycle of events (best a multiple of --sample-every).")
    var cycle = "60s"

    @Option(help: "Every this many cycles, the last restarts the broker while a key is refused (0: never).")
    var restartEvery = 4

    @Option(help: "Cycles at the start left out of the slope test.")
    var warmUpCycles = 1

    @Option(help: "How often the worker's resources are sampled.")
    var sampleEvery = "10s"

    @Option(help: "Jobs published a second, over the four bundles.")
    var rate = 20

    @Option(help: "The worker's prefetch (the in-flight window that bounds duplicates per broker restart).")
    var prefetch = 20

    @Option(help: "How long the jobs may take to reach their ends once the events stop.")
    var drainTimeout = "5m"

    @Option(help: "Where samples.csv, events.log, summary.txt and worker.log go (default .soak/<date-time>).")
    var out: String?

    @Option(help: "This repository's scripts/broker.sh (the soak's own node, restarted during the run).")
    var brokerScript = "scripts/broker.sh"

    @Option(help: "The apns-worker executable to soak (default: the one beside this binary).")
    var worker: String?

    @Flag(help: "Broker stops are kill -9s of the node (a crash), not graceful stops: nothing it confirmed may be lost.")
    var killBroker = false

    @Flag(help: "Then draw soak.png from samples.csv (scripts/soak-plot.sh beside --broker-script; installs gnuplot).")
    var plot = false

    static let bundles = ["a", "b", "c", "spare"].map { "com.example.soak.\($0)" }
    static let keyIDs = ["KEY1234567", "KEY2345678"]
    static let teamID = "TEAM123456"

    func run() async throws {
        guard let runFor = SoakDuration.parse(self.duration), let cycleLength = SoakDuration.parse(self.cycle), cycleLength > .zero,
            let sampling = SoakDuration.parse(self.sampleEvery), sampling > .zero, let drainLimit = SoakDuration.parse(self.drainTimeout)
        else { throw ValidationError("--duration, --cycle, --sample-every and --drain-timeout are durations: 90s, 5m, 1h30m") }
        let schedule = SoakSchedule(duration: runFor, cycle: cycleLength, restartEvery: restartEvery, warmUpCycles: warmUpCycles)
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyyMMdd-HHmmss"
        let output = try SoakOutput(directory: out ?? ".soak/\(formatter.string(from: Date()))")
        print("soak: \(self.duration) in cycles of \(self.cycle), a broker restart every \(restartEvery) cycles; output in \(output.directory)")
        let broker = try await SoakBroker.start(
            directory: NSTemporaryDirectory() + "apnsw-soak-broker-\(UUID().uuidString.prefix(8))", script: brokerScript)
        let result: (summary: [String], failures: [String])
        do {
            // Ctrl-C or SIGTERM ends the run early, judged as far as it went, and still stops the
            // worker and the node: an hour's run is often cut short, and must not leave them behind.
            let soak = Task {
                try await self.soak(schedule: schedule, sampleEvery: sampling, drainTimeout: drainLimit, broker: broker, output: output)
            }
            let interrupts = [SIGINT, SIGTERM].map { number in
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number)
                source.setEventHandler { soak.cancel() }
                source.resume()
                return source
            }
            defer { interrupts.forEach { $0.cancel() } }
            result = try await soak.value
        } catch {
            await broker.stop()
            try? FileManager.default.removeItem(atPath: broker.directory)
            throw error
        }
        await broker.stop()
        try? FileManager.default.removeItem(atPath: broker.directory)
        let verdict = result.failures.isEmpty ? ["PASS"] : ["FAIL:"] + result.failures.map { "  - " + $0 }
        let text = (["apns-worker-bench " + CommandLine.arguments.dropFirst().joined(separator: " ")] + result.summary + verdict).joined(separator: "\n")
        try (text + "\n").write(toFile: output.summaryPath, atomically: true, encoding: .utf8)
        print(text)
        if plot {
            let script = URL(fileURLWithPath: brokerScript).deletingLastPathComponent().appendingPathComponent("soak-plot.sh").path
            let result = await runSoakProcess("/bin/bash", [script, output.directory])
            print(result.status == 0 ? "plot: \(output.directory)/soak.png" : "plot failed: \(result.output)")
        }
        if !result.failures.isEmpty { throw ExitCode.failure }
    }

    /// Sets up the simulator and the worker, runs, drains and judges; the summary's lines and the failures.
    private func soak(
        schedule: SoakSchedule, sampleEvery: Duration, drainTimeout: Duration, broker: SoakBroker, output: SoakOutput
    ) async throws -> (summary: [String], failures: [String]) {
        var logger = Logger(label: "soak")
        logger.logLevel = .warning
        let bundles = Self.bundles
        let secondKey = P256.Signing.PrivateKey()
        let recordLimit = Int(Double(rate) * schedule.duration.timeInterval * 1.5) + 10_000
        let setup = try await BenchWorkerSetup.start(
            directoryPrefix: "apnsw-soak", bundleIDs: bundles, recordLimit: recordLimit,
            tokenKeys: [SimulatorTokenKey(keyID: Self.keyIDs[1], teamID: Self.teamID, publicKey: secondKey.publicKey)], logger: logger)
        defer { setup.remove() }
        let credentials = setup.directory + "/credentials"
        let secondKeyPath = credentials + "/AuthKey_\(Self.keyIDs[1]).p8"
        try (secondKey.pemRepresentation + "\n").write(toFile: secondKeyPath, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: secondKeyPath)

        let adminPort = try freeSoakPort()
        let configPath = setup.directory + "/worker.conf"
        let url = broker.url, window = prefetch, simulatorPort = setup.simulator.port
        let writeConfiguration: @Sendable (Int) throws -> Void = { reloads in
            try Self.configuration(
                url: url, adminPort: adminPort, prefetch: window, simulatorPort: simulatorPort, credentials: credentials, reloads: reloads
            ).write(toFile: configPath, atomically: true, encoding: .utf8)
        }
        try writeConfiguration(0)
        let executable =
            self.worker ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("apns-worker").path
        let worker = try SoakWorker(executable: executable, configPath: configPath, logPath: output.directory + "/worker.log")
        do {
            try await Self.waitForReady(worker: worker, adminPort: adminPort, bundles: bundles.count)
        } catch {
            _ = await worker.stop(grace: .seconds(10))
            try? await setup.simulator.shutdown()
            throw error
        }

        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(urlStrings: [broker.url], connectionName: "apns-worker-bench soak"), logger: logger)
        let feedbackQueue = "soak.feedback"
        _ = try await connection.declareQueue(QueueDeclaration(name: feedbackQueue, arguments: ["x-queue-type": .string("quorum")]))
        try await connection.bind(BindingDeclaration(queue: feedbackQueue, exchange: TopologyNames.feedbackExchange, routingKey: "#"))

        let run = SoakRun(
            schedule: schedule, sampleEvery: sampleEvery, rate: rate, bundles: bundles, broker: broker, simulator: setup.simulator,
            worker: worker, connection: connection, sampler: SoakSampler(pid: worker.pid, broker: broker, adminPort: adminPort),
            output: output, killBroker: killBroker, writeConfiguration: writeConfiguration)
        let collectors = Task {
            await withTaskGroup(of: Void.self) { group in
                for bundle in bundles { group.addTask { await run.collect(queue: TopologyNames.deadQueue(bundle), .dead) } }
                group.addTask { await run.collect(queue: feedbackQueue, .feedback) }
                for queue in [TopologyNames.unrouted, TopologyNames.feedbackUnrouted] { group.addTask { await run.collect(queue: queue, .unrouted) } }
            }
        }
        var failures: [String] = []
        do {
            try await run.run()
        } catch is CancellationError {
            failures.append("interrupted \(Int(run.elapsed.timeInterval)) s into the run")
        } catch {
            failures.append("\(error)")
        }
        if Task.isCancelled, failures.isEmpty { failures.append("interrupted \(Int(run.elapsed.timeInterval)) s into the run") }

        // The end: everything undone, the spare bundle configured again, and every job given its
        // time to reach its end.
        let drainStarted = ContinuousClock.now
        if failures.isEmpty {
            await run.undoEverything()
            while !run.state.withLock({ $0.ledger }).allSeen(run.seen()), drainStarted.duration(to: .now) < drainTimeout, worker.isRunning,
                !Task.isCancelled
            {
                try? await Task.sleep(for: .seconds(2))
            }
        }
        let drained = drainStarted.duration(to: .now)
        // In a task of its own: an interrupted run is cancelled, and its waits would not wait.
        let settle = failures.isEmpty
        let ((queues, leftOver), exitStatus) = await Task {
            let queues = await Self.workQueues(bundles, broker: broker, wait: settle ? .seconds(60) : .zero)
            let exitStatus = await worker.stop(grace: .seconds(60))
            collectors.cancel()
            await connection.close()
            try? await setup.simulator.shutdown()
            return (queues, exitStatus)
        }.value

        let state = run.state.withLock { $0 }
        let verdict = state.ledger.verdict(run.seen(), windowPerRestart: prefetch * bundles.count, restarts: state.restarts)
        let trends = SoakSampler.trends(state.samples, prefetch: prefetch)
        failures += verdict.failures
        failures += trends.filter(\.isGrowing).map { "\($0.resource) keeps growing: \($0.line)" }
        if trends.allSatisfy({ $0.slopePerHour == nil }) {
            failures.append("no resource could be judged (\(state.samples.filter(\.judged).count) judged samples): run longer or with a shorter --cycle")
        }
        failures += state.problems
        if !state.unrouted.isEmpty {
            failures.append("\(state.unrouted.count) messages routed to no queue: \(state.unrouted.prefix(10).joined(separator: ", "))")
        }
        if settle, leftOver > 0 {
            failures.append("\(leftOver) messages left in the work queues a minute after every job reached its end: copies no end accounts for")
        }
        if exitStatus != 0 { failures.append("the worker exited with status \(exitStatus) on SIGTERM") }

        let counts = SoakAction.allCases.compactMap { action in state.counts[action].map { "\(action.rawValue) \($0)" } }
        var summary = [
            "run: \(schedule.cycleCount) cycles of \(schedule.cycle), \(rate) jobs/s over \(bundles.count) bundles, prefetch \(prefetch); drained in \(Int(drained.timeInterval)) s",
            "events: " + counts.joined(separator: ", "),
            "jobs: \(verdict.published) published, \(verdict.ended) at their end, \(verdict.lost.count) lost, \(verdict.goodDeadLettered.count) good ones dead-lettered, \(verdict.wrongEnd.count) at the wrong end; \(verdict.duplicates) sent twice (at most \(verdict.duplicateBound))",
            "samples: \(state.samples.count), \(state.samples.filter(\.judged).count) judged (quiet parts of normal cycles after the warm-up)",
        ]
        summary += queues.map { "queue at the end: " + $0 }
        summary += trends.map { "trend: " + $0.line }
        return (summary, failures)
    }

    /// The worker's configuration after `reloads` reloads (`SoakSchedule.configuration`): quick
    /// probes and heartbeats, so a held bundle probes and a pause lands within the events' seconds,
    /// and `maxDeliveries` low, so deliveries that a hold wrongly counts show within a short run.
    /// `maxAttempts` high: the dropped-connection phase loses a connection every ten streams, and
    /// three losses in a row are a fair `RetriesExhausted` (contract §4), not a leak; ten are not.
    static func configuration(url: String, adminPort: Int, prefetch: Int, simulatorPort: Int, credentials: String, reloads: Int) -> String {
        let state = SoakSchedule.configuration(afterReloads: reloads)
        var text = """
            [amqp]
            url = \(url)
            prefetch = \(prefetch)
            [admin]
            listen = 127.0.0.1:\(adminPort)
            heartbeatInterval = 1s
            [worker]
            probeInterval = 2s
            maxDeliveries = 5
            [retry]
            delays = 1s
            maxAttempts = 10

            """
        for (index, bundle) in bundles.enumerated() where index != 3 || state.spareConfigured {
            let keyID = keyIDs[index == 0 ? state.rotatedKeyIndex : 0]
            text += """
                [apns "\(bundle)"]
                teamId = \(teamID)
                keyId = \(keyID)
                tokenKeyFile = \(credentials)/AuthKey_\(keyID).p8
                host = 127.0.0.1
                port = \(simulatorPort)
                caFile = \(credentials)/ca.pem

                """
        }
        return text
    }

    /// Until the worker's admin says it is connected with every bundle.
    static func waitForReady(worker: SoakWorker, adminPort: Int, bundles: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(180)
        while ContinuousClock.now < deadline {
            if let status = worker.exited {
                throw SoakError("the worker exited (status \(status)) before it was ready:\n\(worker.logTail(20))")
            }
            if let status = await curlJSON("http://127.0.0.1:\(adminPort)/api/status") as? [String: Any],
                status["broker"] as? String == "connected", (status["bundles"] as? [Any])?.count == bundles
            {
                return
            }
            try await Task.sleep(for: .milliseconds(500))
        }
        throw SoakError("the worker was not ready within 180 s:\n\(worker.logTail(20))")
    }

    /// Each bundle's work queue as the broker has it: messages left and consumers.
    /// Each work queue's messages at the end, read once all of them are empty or `wait` has
    /// passed, and how many were left. The management API's counts lag by its statistics interval
    /// (5 s) and the worker may still be acking the last jobs, so one read right after the drain
    /// can show a message that is gone a moment later; a message that stays while the worker
    /// consumes is a copy no end accounts for (a hand-back or a redelivery nobody answered).
    static func workQueues(_ bundles: [String], broker: SoakBroker, wait: Duration = .seconds(60)) async -> (lines: [String], leftOver: Int) {
        let deadline = ContinuousClock.now + wait
        while true {
            var lines: [String] = []
            var leftOver = 0
            for bundle in bundles {
                let name = TopologyNames.workQueue(bundle)
                let queue = await broker.managementJSON("/queues/%2f/" + name) as? [String: Any]
                let ready = queue?["messages_ready"] as? Int, unacked = queue?["messages_unacknowledged"] as? Int
                let consumers = queue?["consumers"] as? Int
                leftOver += (ready ?? 1) + (unacked ?? 0)
                let count = { (value: Int?) in value.map(String.init) ?? "?" }
                lines.append("\(name): \(count(ready)) ready, \(count(unacked)) unacked, \(count(consumers)) consumers")
            }
            if leftOver == 0 || ContinuousClock.now >= deadline { return (lines, leftOver) }
            try? await Task.sleep(for: .seconds(2))
        }
    }
}
