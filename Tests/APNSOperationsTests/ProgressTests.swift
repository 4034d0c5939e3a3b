// The progress of long requeues and purges: the meter's line and pacing (pure), what the
// inspector reports as it goes (real broker), and the CLI on a pseudo-terminal, with --json and
// without a terminal (real processes).
import APNSModel
import APNSOperations
import APNSTopologyNames
import Foundation
import Synchronization
import Testing
import TestSupport

struct ProgressMeterTests {
    @Test func lineSaysCountsShareAndRate() {
        let line = ProgressMeter.format(OperationProgress(settled: 1200, examined: 3000, total: 5000), verb: "requeued", elapsed: .seconds(2))
        #expect(line == "requeued 1200 job(s), 3000 of 5000 examined (60%), 600/s")
        // A queue that grew while read, and an empty scope, never show more than 100 %.
        #expect(ProgressMeter.format(OperationProgress(settled: 7, examined: 7, total: 5), verb: "purged", elapsed: .zero)
            == "purged 7 job(s), 7 of 5 examined (100%), 0/s")
        #expect(ProgressMeter.format(OperationProgress(settled: 0, examined: 0, total: 0), verb: "purged", elapsed: .seconds(1))
            == "purged 0 job(s), 0 of 0 examined (100%), 0/s")
    }

    @Test func drawsTheFirstUpdateThenAtMostEveryIntervalAndAlwaysTheLast() {
        let start = ContinuousClock.now
        var meter = ProgressMeter(verb: "requeued", start: start, interval: .milliseconds(200))
        let step = { (n: Int) in OperationProgress(settled: n, examined: n, total: 10) }
        #expect(meter.line(step(1), at: start + .milliseconds(1)) != nil)
        #expect(meter.line(step(2), at: start + .milliseconds(100)) == nil)
        #expect(meter.line(step(3), at: start + .milliseconds(199)) == nil)
        #expect(meter.line(step(4), at: start + .milliseconds(201)) == "requeued 4 job(s), 4 of 10 examined (40%), 20/s")
        #expect(meter.line(step(5), at: start + .milliseconds(250)) == nil)
        #expect(meter.line(step(10), at: start + .milliseconds(260), final: true) == "requeued 10 job(s), 10 of 10 examined (100%), 38/s")
    }
}

@Suite(.enabled(if: TestBroker.isAvailable && FileManager.default.isExecutableFile(atPath: workerExecutable)), .serialized)
struct OperationProgressTests {
    @Test func inspectorReportsAsItGoes() async throws {
        let bundle = try await TestBundle.make(.quorum)
        try await bundle.seedDead(jobIDs(300), reason: { $0 % 3 == 0 ? "Unregistered" : "BadDeviceToken" })
        let seen = Mutex<[OperationProgress]>([])
        let filter = JobFilter(bundleID: bundle.bundleID, reason: "Unregistered")
        let report = try await bundle.inspector().requeue(.dead, .all(filter)) { progress in seen.withLock { $0.append(progress) } }
        #expect(report.moved == 100)
        let updates = seen.withLock { $0 }
        #expect(updates.count == 300)
        #expect(updates.allSatisfy { $0.total == 300 })
        #expect(updates.map(\.examined) == Array(1...300))
        #expect(zip(updates, updates.dropFirst()).allSatisfy { $0.settled <= $1.settled })
        #expect(updates.last?.settled == 100)
        try await waitUntil("the requeued jobs in the work queue") { try await bundle.depth(bundle.work) == 100 }
    }

    /// Runs the CLI on a pseudo-terminal (stdout and stderr both on it), through python's pty:
    /// its exit status and everything the terminal received.
    private func onTerminal(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let script = """
            import os, subprocess, sys
            master, slave = os.openpty()
            child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
            os.close(slave)
            out = b""
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            sys.stdout.buffer.write(out)
            sys.exit(child.wait())
            """
        let result = try await runProcess("/usr/bin/python3", ["-c", script, workerExecutable] + arguments)
        // The terminal turns each "\n" into "\r\n".
        return (result.status, result.stdout.replacingOccurrences(of: "\r\n", with: "\n"))
    }

    @Test func requeueShowsProgressOnATerminalOnly() async throws {
        let bundle = try await TestBundle.make(.quorum)
        try await bundle.seedDead(jobIDs(2000))
        let scope = ["--url", bundle.broker.amqpURL, "--bundle", bundle.bundleID]

        let terminal = try await onTerminal(["dead", "requeue", "--all"] + scope)
        #expect(terminal.status == 0, "\(terminal.output)")
        let redraws = terminal.output.components(separatedBy: "\u{1B}[K")
        #expect(redraws.count >= 2, "\(terminal.output)")
        #expect(terminal.output.contains("\rrequeued 2000 job(s), 2000 of 2000 examined (100%), "))
        #expect(terminal.output.hasSuffix("/s\u{1B}[K\nrequeued 2000 dead job(s) to their work queue\n"), "\(terminal.output)")
        try await waitUntil("the jobs in the work queue") { try await bundle.depth(bundle.work) == 2000 }

        // More dead jobs, requeued with --json on a terminal: the JSON only.
        try await bundle.seedDead(jobIDs(2000, "again"))
        let json = try await onTerminal(["dead", "requeue", "--all", "--json"] + scope)
        #expect(json.status == 0)
        #expect(!json.output.contains("\u{1B}[K") && !json.output.contains("examined"))
        let object = try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any]
        #expect(object?["moved"] as? Int == 2000)
    }

    @Test func purgeShowsNothingExtraWithoutATerminal() async throws {
        let bundle = try await TestBundle.make(.quorum)
        try await bundle.seedDead(jobIDs(1500), reason: { $0 < 1000 ? "Unregistered" : "BadDeviceToken" })
        let scope = ["--url", bundle.broker.amqpURL, "--bundle", bundle.bundleID]
        // Selected jobs (acked one by one), then the whole queue (purged at once).
        let selected = try await runProcess(workerExecutable, ["dead", "purge", "--all", "--yes", "--reason", "Unregistered"] + scope)
        #expect(selected.status == 0, "\(selected.stderr)")
        #expect(selected.stdout == "purged 1000 dead job(s)\n")
        #expect(!selected.stderr.contains("examined") && !selected.stderr.contains("\u{1B}[K"))
        let terminal = try await onTerminal(["dead", "purge", "--all", "--yes"] + scope)
        #expect(terminal.status == 0)
        #expect(terminal.output.contains("\rpurged 500 job(s), 500 of 500 examined (100%), "), "\(terminal.output)")
        #expect(terminal.output.hasSuffix("\npurged 500 dead job(s)\n"))
    }
}
