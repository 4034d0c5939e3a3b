import AMQPClient
import APNSSimulator
import APNSTopologyNames
import APNSWorker
import Foundation
import Testing
import TestSupport

/// Contract §3, "Changes while running", bullet by bullet, through the real broker, the real
/// `apns-worker` process and the simulator: a bundle added, removed and added again, a token key
/// rotated, a certificate rotated by a Kubernetes-style symlink swap (no signal), a broken file,
/// a restart-only change. Each counts deliveries at the simulator by job (or device token) and
/// checks that none is lost or sent twice.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct ReloadEndToEndTests {
    /// The worker's configuration file, written by the test as often as it likes.
    struct Config {
        let h: WorkerHarness
        var retryDelays = "300ms, 600ms"
        var prefetch = 100
        var amqpLines = ""
        var adminLines = ""

        /// The token section of the harness's simulator for `keyID` (the harness's own key, or
        /// one of `Options.extraCredentials`).
        func tokenSection(keyID: String = "KEY1234567") -> String {
            let folder = keyID == "KEY1234567" ? "credentials" : "credentials-\(keyID)"
            return """
                teamId = TEAM123456
                keyId = \(keyID)
                tokenKeyFile = \(folder)/AuthKey_\(keyID).p8
                host = 127.0.0.1
                port = \(h.simulator.port)
                caFile = credentials/ca.pem
                connections = 2
                """
        }

        func text(_ sections: [(bundle: String, lines: String)]) -> String {
            var text = """
                [amqp]
                url = \(h.broker.amqpURL)
                prefetch = \(prefetch)
                heartbeat = 5s
                \(amqpLines)

                [retry]
                delays = \(retryDelays)
                maxAttempts = 3

                [admin]
                listen = 127.0.0.1:0
                \(adminLines)

                [worker]
                shutdownDeadline = 10s
                requestTimeout = 30s
                probeInterval = 500ms

                """
            for section in sections { text += "\n[apns \"\(section.bundle)\"]\n\(section.lines)\n" }
            return text
        }

        /// Writes the file atomically (a new file renamed over the old, as editors and
        /// configuration tools do).
        func write(_ sections: [(bundle: String, lines: String)]) throws {
            try text(sections).write(toFile: h.configPath, atomically: true, encoding: .utf8)
        }
    }

    /// The worker's warnings, errors and notices (its last 40), for a failure's message: a CI
    /// run keeps nothing else of the process once the test has ended.
    static func diagnosis(_ worker: ChildProcess) -> String {
        let lines = worker.log.split(separator: "\n").filter { $0.contains(" warning ") || $0.contains(" error ") || $0.contains(" notice ") || $0.contains(" critical ") }
        return "\nworker log:\n" + lines.suffix(40).joined(separator: "\n")
    }

    /// `waitUntil`, whose time-out also says what the worker logged.
    static func waitTelling(_ worker: ChildProcess, _ what: String, _ condition: () async throws -> Bool) async throws {
        do {
            try await TestSupport.waitUntil(what, condition)
        } catch {
            Issue.record("\(error)\(diagnosis(worker))")
            throw error
        }
    }

    static func occurrences(_ needle: String, in log: String) -> Int {
        log.components(separatedBy: needle).count - 1
    }

    /// Waits for the `n`-th "configuration change applied" line, and returns the log.
    @discardableResult
    static func waitForApplied(_ worker: ChildProcess, count n: Int, containing: String) async throws -> String {
        try await waitTelling(worker, "configuration change #\(n) applied (\(containing))") {
            occurrences("configuration change applied", in: worker.log) >= n
        }
        let line = worker.log.split(separator: "\n").filter { $0.contains("configuration change applied") }[n - 1]
        #expect(line.contains(containing), "\(line)")
        return worker.log
    }

    /// How many times the simulator accepted each of `ids` for `bundle`, by lower-case id.
    static func acceptances(_ h: WorkerHarness, bundle: String) -> [String: Int] {
        h.simulator.accepted().filter { $0.topic == bundle }.reduce(into: [:]) { $0[$1.apnsID.lowercased(), default: 0] += 1 }
    }

    static func publish(_ h: WorkerHarness, _ count: Int, to bundle: String, from first: Int) async throws -> [String] {
        var ids: [String] = []
        for n in first..<(first + count) {
            ids.append(try await h.publishJob(token: WorkerHarness.token(n), bundle: bundle).uuidString.lowercased())
        }
        return ids
    }

    // MARK: - Bundles added, removed, added again

    @Test func aBundleAddedRemovedAndAddedAgainLosesAndRepeatsNoJob() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let (a, b) = (h.bundles[0], h.bundles[1])
        // B's queues do not exist until the worker declares them for the added section.
        for queue in [TopologyNames.workQueue(b), TopologyNames.deadQueue(b)] + [300, 600].map({
            TopologyNames.retryQueue(b, delay: .milliseconds($0))
        }) {
            _ = try await h.connection.deleteQueue(queue)
        }
        var config = Config(h: h)
        // Ten jobs in flight per bundle at most once both run (the window grows from the
        // prefetch to the budget's share), so a removal finds some still to take.
        config.prefetch = 10
        config.amqpLines = "maxInFlight = 20"
        try config.write([(a, config.tokenSection())])
        let worker = try h.startWorker()
        defer { worker.kill9() }

        var idsA = try await Self.publish(h, 20, to: a, from: 0)
        try await Self.waitTelling(worker, "A's first jobs") { Self.acceptances(h, bundle: a).count == 20 }

        // Added (SIGHUP): its topology is declared and its queue consumed.
        try config.write([(a, config.tokenSection()), (b, config.tokenSection())])
        worker.signal(SIGHUP)
        try await Self.waitForApplied(worker, count: 1, containing: "added [apns \"\(b)\"]")
        _ = try await h.connection.inspectQueue(TopologyNames.workQueue(b))
        var idsB = try await Self.publish(h, 20, to: b, from: 100)
        try await Self.waitTelling(worker, "B's jobs after it was added") { Self.acceptances(h, bundle: b).count == 20 }

        // Removed while its jobs are in flight (the simulator answers slowly, ten at a time):
        // those in flight finish and settle, the rest wait in its queue. 600 jobs at 5 a second
        // take two minutes, so however slowly the change is applied, some are still to take;
        // those in flight take 2 s, well within the 10 s shutdown deadline.
        var faults = SimulatorFaults()
        faults.latency = .seconds(2)
        h.simulator.setFaults(faults)
        // Many confirms awaited at once: one by one, 600 jobs took longer on a loaded machine
        // than the worker took to send them.
        idsB += try await h.publishMany(600, bundle: b, firstToken: 1_000).map { $0.uuidString.lowercased() }
        try await Self.waitTelling(worker, "some of B's new jobs in flight") { Self.acceptances(h, bundle: b).count > 20 }
        try config.write([(a, config.tokenSection())])
        worker.signal(SIGHUP)
        try await Self.waitForApplied(worker, count: 2, containing: "removed [apns \"\(b)\"]")
        h.simulator.setFaults(SimulatorFaults())
        let deliveredBeforeRemoval = Self.acceptances(h, bundle: b).count
        try await Self.waitTelling(worker, "B's remaining jobs back in its queue, none in flight") {
            try await h.messageCount(TopologyNames.workQueue(b)) == UInt32(idsB.count - deliveredBeforeRemoval)
        }
        #expect(deliveredBeforeRemoval < idsB.count, "the removal came while B still had jobs to take\(Self.diagnosis(worker))")
        // A goes on; B's queue is kept and not consumed.
        idsA += try await Self.publish(h, 20, to: a, from: 3_000)
        try await Self.waitTelling(worker, "A's jobs after B was removed") { Self.acceptances(h, bundle: a).count == 40 }
        #expect(Self.acceptances(h, bundle: b).count == deliveredBeforeRemoval, "B sent while removed\(Self.diagnosis(worker))")

        // Added again: the jobs that waited are delivered, each once.
        try config.write([(a, config.tokenSection()), (b, config.tokenSection())])
        worker.signal(SIGHUP)
        try await Self.waitForApplied(worker, count: 3, containing: "added [apns \"\(b)\"]")
        try await Self.waitTelling(worker, "every job of B") { Self.acceptances(h, bundle: b).count == idsB.count }
        try await Self.waitTelling(worker, "B's queue empty") { try await h.messageCount(TopologyNames.workQueue(b)) == 0 }

        #expect(Set(Self.acceptances(h, bundle: a).keys) == Set(idsA))
        #expect(Set(Self.acceptances(h, bundle: b).keys) == Set(idsB))
        for bundle in [a, b] {
            let twice = Self.acceptances(h, bundle: bundle).filter { $0.value > 1 }
            #expect(twice.isEmpty, "sent twice (of \(bundle)): \(twice.keys.sorted())\(Self.diagnosis(worker))")
            #expect(try await h.messageCount(TopologyNames.deadQueue(bundle)) == 0)
        }
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(20)) == 0)
        await h.shutdown()
    }

    // MARK: - A token key rotated

    @Test func aRotatedTokenKeySignsEveryLaterRequestOnNewConnections() async throws {
        var options = WorkerHarness.Options()
        options.extraCredentials = ["KEY7654321"]
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let config = Config(h: h)
        try config.write([(h.bundle, config.tokenSection())])
        let worker = try h.startWorker()
        defer { worker.kill9() }
        var ids = try await Self.publish(h, 50, to: h.bundle, from: 0)
        try await waitUntil("the first jobs, signed by the first key") { Self.acceptances(h, bundle: h.bundle).count == 50 }
        try await waitUntil("the first key's 2 connections") { h.simulator.counters().openConnections == 2 }

        // Jobs keep arriving, slowly answered, while the key changes.
        var faults = SimulatorFaults()
        faults.latency = .milliseconds(20)
        h.simulator.setFaults(faults)
        async let during = Self.publish(h, 200, to: h.bundle, from: 1000)
        try config.write([(h.bundle, config.tokenSection(keyID: "KEY7654321"))])
        worker.signal(SIGHUP)
        try await Self.waitForApplied(worker, count: 1, containing: "keyId, tokenKeyFile")
        // The old unit's jobs all ended before the change was applied: whatever is accepted
        // from here on was sent after the change was read.
        let beforeLater = h.simulator.accepted().count
        ids += try await during
        ids += try await Self.publish(h, 50, to: h.bundle, from: 2000)
        try await waitUntil("every job") { Self.acceptances(h, bundle: h.bundle).count == 300 }

        let accepted = h.simulator.accepted()
        #expect(Set(Self.acceptances(h, bundle: h.bundle).keys) == Set(ids))
        #expect(Self.acceptances(h, bundle: h.bundle).values.allSatisfy { $0 == 1 }, "no job sent twice")
        // Every request sent after the change was read: the new key.
        let later = accepted[beforeLater...]
        #expect(later.count >= 50)
        #expect(later.allSatisfy { $0.authentication == .token(keyID: "KEY7654321", teamID: "TEAM123456") })
        // Apple refuses a new key on a connection that sent another's: it never happened, and
        // the old connections were closed (the new key's 2 remain).
        #expect(h.simulator.counters().byReason["TooManyProviderTokenUpdates"] == nil)
        try await waitUntil("only the new connections open") {
            let counters = h.simulator.counters()
            return counters.openConnections == 2 && counters.connections >= 4
        }
        #expect(try await h.messageCount(h.deadQueue) == 0)
        await h.shutdown()
    }

    // MARK: - A certificate rotated by a Kubernetes secret update, no signal

    @Test func aCertificateRotatedBySwappingTheSecretsSymlinkIsUsedWithoutASignal() async throws {
        var options = WorkerHarness.Options()
        options.extraCredentials = ["KEYROTATED"]
        options.binaryHoldWindow = "200ms"  // the simulator opens its binary gateway
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let port = try #require(h.simulator.binaryPort, "the simulator's binary gateway")
        // A mounted secret as Kubernetes lays it out: the files link through `..data` to a
        // timestamped directory; an update writes a new directory and renames a new `..data`
        // link over the old one.
        let secret = h.directory + "/secret"
        let manager = FileManager.default
        try manager.createDirectory(atPath: secret + "/..2026_11_27_01", withIntermediateDirectories: true)
        try manager.copyItem(atPath: h.credentials.clientCertificatePath, toPath: secret + "/..2026_11_27_01/client.pem")
        try manager.copyItem(atPath: h.credentials.clientKeyPath, toPath: secret + "/..2026_11_27_01/client.key")
        try manager.createSymbolicLink(atPath: secret + "/..data", withDestinationPath: "..2026_11_27_01")
        for file in ["client.pem", "client.key"] {
            try manager.createSymbolicLink(atPath: secret + "/" + file, withDestinationPath: "..data/" + file)
        }
        let config = Config(h: h)
        let binary = """
            transport = binary
            certFile = secret/client.pem
            keyFile = secret/client.key
            binaryHoldWindow = 200ms
            feedbackInterval = 0
            host = 127.0.0.1
            port = \(port)
            caFile = credentials/ca.pem
            connections = 1
            """
        try config.write([(h.bundle, binary)])
        let worker = try h.startWorker()
        defer { worker.kill9() }

        let firstTopic = "com.example.app"
        let rotatedTopic = WorkerHarness.extraClientTopic("KEYROTATED")
        func tokens(_ range: Range<Int>) -> [String] { range.map { WorkerHarness.token($0) } }
        for token in tokens(0..<40) { try await h.publishJob(token: token) }
        try await waitUntil("the first jobs, under the first certificate") {
            h.simulator.accepted().filter { $0.topic == firstTopic }.count == 40
        }

        // The update: the rotated certificate and key in a new directory, `..data` swapped.
        let rotated = h.directory + "/credentials-KEYROTATED"
        try manager.createDirectory(atPath: secret + "/..2026_11_27_02", withIntermediateDirectories: true)
        try manager.copyItem(atPath: rotated + "/client.pem", toPath: secret + "/..2026_11_27_02/client.pem")
        try manager.copyItem(atPath: rotated + "/client.key", toPath: secret + "/..2026_11_27_02/client.key")
        try manager.createSymbolicLink(atPath: secret + "/..data_tmp", withDestinationPath: "..2026_11_27_02")
        async let during: Void = { for token in tokens(40..<140) { try await h.publishJob(token: token) } }()
        #expect(rename(secret + "/..data_tmp", secret + "/..data") == 0)
        try await Self.waitForApplied(worker, count: 1, containing: "certFile (content), keyFile (content)")
        try await during
        let beforeLater = h.simulator.accepted().count
        for token in tokens(140..<180) { try await h.publishJob(token: token) }
        try await waitUntil("every job") { h.simulator.accepted().count == 180 }

        let counts = h.acceptedTokenCounts()
        #expect(Set(counts.keys) == Set(tokens(0..<180)), "no job lost")
        #expect(counts.values.allSatisfy { $0 == 1 }, "no job sent twice")
        #expect(h.simulator.accepted()[beforeLater...].allSatisfy { $0.topic == rotatedTopic }, "the new certificate after the change")
        #expect(worker.log.contains("SIGHUP") == false, "noticed by itself")
        #expect(Self.occurrences("trigger=file change", in: worker.log) >= 1)
        #expect(try await h.messageCount(h.deadQueue) == 0)
        await h.shutdown()
    }

    // MARK: - A file the worker cannot use

    @Test func aBrokenFileChangesNothingAndSaysWhyOnce() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let (a, b) = (h.bundles[0], h.bundles[1])
        let config = Config(h: h)
        try config.write([(a, config.tokenSection())])
        let worker = try h.startWorker()
        defer { worker.kill9() }
        var idsA = try await Self.publish(h, 10, to: a, from: 0)
        try await waitUntil("A's first jobs") { Self.acceptances(h, bundle: a).count == 10 }

        // A usable new bundle and a bad key elsewhere: not even the usable part is applied.
        let broken = [(a, config.tokenSection() + "\nconnections = 99"), (b, config.tokenSection())]
        try config.write(broken)
        let errorLine = "[apns \"\(a)\"] connections"
        try await waitUntil("the start-up error line", timeout: .seconds(60)) { worker.log.contains(errorLine) }
        // The same check-config prints, word for word.
        let check = try await runProcess(workerExecutable, ["check-config", h.configPath])
        #expect(check.status != 0)
        let startUpLine = check.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(worker.log.contains(startUpLine), "\(startUpLine)")
        // Rewritten with the same bytes: no change, no second line. The configuration in force
        // still delivers A and does not consume B.
        try config.write(broken)
        idsA += try await Self.publish(h, 10, to: a, from: 100)
        let idsB = try await Self.publish(h, 10, to: b, from: 200)
        try await waitUntil("A's jobs under the configuration in force") { Self.acceptances(h, bundle: a).count == 20 }
        try await waitUntil("B's jobs waiting in its queue") { try await h.messageCount(TopologyNames.workQueue(b)) == 10 }
        #expect(Self.acceptances(h, bundle: b).isEmpty)

        // Fixed: applied, and the error was said once for the one broken change.
        try config.write([(a, config.tokenSection()), (b, config.tokenSection())])
        try await Self.waitForApplied(worker, count: 1, containing: "added [apns \"\(b)\"]")
        #expect(Self.occurrences(errorLine, in: worker.log) == 1)
        try await waitUntil("B's jobs") { Self.acceptances(h, bundle: b).count == 10 }
        #expect(Set(Self.acceptances(h, bundle: a).keys) == Set(idsA))
        #expect(Set(Self.acceptances(h, bundle: b).keys) == Set(idsB))
        #expect(h.simulator.accepted().count == 30, "no job sent twice")
        await h.shutdown()
    }

    /// A FIFO named by the configuration (no writer: opening it blocks) blocked the reloader for
    /// ever, on the poll or the read of the next change. It is refused, with the start-up line,
    /// and the next change is applied.
    @Test func aFIFONamedAtASIGHUPIsRefusedAndTheReloaderGoesOn() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let (a, b) = (h.bundles[0], h.bundles[1])
        let config = Config(h: h)
        try config.write([(a, config.tokenSection())])
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let idsA = try await Self.publish(h, 10, to: a, from: 0)
        try await waitUntil("A's jobs") { Self.acceptances(h, bundle: a).count == 10 }

        #expect(mkfifo(h.directory + "/credentials/fifo.p8", 0o600) == 0)
        let fifoSection = config.tokenSection().replacingOccurrences(
            of: "tokenKeyFile = credentials/AuthKey_KEY1234567.p8", with: "tokenKeyFile = credentials/fifo.p8")
        try config.write([(a, config.tokenSection()), (b, fifoSection)])
        worker.signal(SIGHUP)
        try await waitUntil("the refusal, naming file, line and key") {
            worker.log.contains("tokenKeyFile: ") && worker.log.contains("fifo.p8 is a FIFO (named pipe), not a regular file")
        }

        try config.write([(a, config.tokenSection()), (b, config.tokenSection())])
        worker.signal(SIGHUP)
        try await Self.waitForApplied(worker, count: 1, containing: "added [apns \"\(b)\"]")
        let idsB = try await Self.publish(h, 10, to: b, from: 100)
        try await waitUntil("B's jobs") { Self.acceptances(h, bundle: b).count == 10 }
        #expect(Set(Self.acceptances(h, bundle: a).keys) == Set(idsA))
        #expect(Set(Self.acceptances(h, bundle: b).keys) == Set(idsB))
        #expect(worker.isRunning)
        await h.shutdown()
    }

    // MARK: - A restart-only change

    @Test func aRestartOnlyChangeIsReportedAndNotApplied() async throws {
        let h = try await WorkerHarness.start(broker: try TestBroker.require())
        var config = Config(h: h)
        try config.write([(h.bundle, config.tokenSection())])
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let port = try await FleetEndToEndTests.adminPort(worker)
        let before = try await Self.status(port)
        let fingerprint = try #require(before.configuration?.fingerprint)
        #expect(before.configuration?.pendingRestart == [])

        // [amqp] and [admin] change, with a [retry] change beside them.
        config.amqpLines = "maxInFlight = 500"
        config.adminLines = "heartbeatInterval = 2s"
        config.retryDelays = "400ms, 600ms"
        try config.write([(h.bundle, config.tokenSection())])
        worker.signal(SIGHUP)
        try await Self.waitForApplied(worker, count: 1, containing: "[retry]")
        let log = worker.log
        #expect(log.contains("configuration change needs a restart: not applied"))
        #expect(log.contains("config.sections=[amqp], [admin]"))
        let after = try await Self.status(port)
        #expect(after.configuration?.pendingRestart == ["[amqp]", "[admin]"])
        #expect(after.configuration?.fingerprint != fingerprint)
        // The admin still listens where it did ([admin] not applied), and jobs still flow.
        let ids = try await Self.publish(h, 20, to: h.bundle, from: 0)
        try await waitUntil("jobs after the change") { Self.acceptances(h, bundle: h.bundle).count == 20 }
        #expect(Set(Self.acceptances(h, bundle: h.bundle).keys) == Set(ids))
        // The page shows the same.
        let page = try await FleetEndToEndTests.http("GET", port, "/")
        #expect(page.body.contains("changed, applied at the next restart: [amqp], [admin]"))
        await h.shutdown()
    }

    /// What `GET /api/status` says of the configuration in force.
    struct StatusAnswer: Decodable {
        var configuration: ConfigurationInForce?
    }

    static func status(_ port: Int) async throws -> StatusAnswer {
        let answer = try await FleetEndToEndTests.http("GET", port, "/api/status")
        #expect(answer.status == 200)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(StatusAnswer.self, from: Data(answer.body.utf8))
    }
}
