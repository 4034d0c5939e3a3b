import AMQPClient
import APNSFleet
import APNSWorker
import Foundation
import Testing
import TestSupport

/// Contract §5's fleet with real `apns-worker run` processes on the test broker: every
/// instance's `/api/fleet`, page and `apns-worker fleet` list the others and add up their
/// counts; a worker killed with -9 drops out; a pause stops every instance, survives a restart,
/// and a resume lets the jobs through. Other suites' workers share the broker (and so the fleet),
/// so each check looks at the instances that run this test's own bundle.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct FleetEndToEndTests {
    static let curl = "/usr/bin/curl"

    static func harness() async throws -> WorkerHarness {
        var options = WorkerHarness.Options()
        // Short, so forgetting (three intervals) and pausing (one) happen within the test.
        options.adminLines = "heartbeatInterval = 1s"
        return try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
    }

    /// The worker's admin port, from its log line "admin HTTP server listening".
    static func adminPort(_ worker: ChildProcess) async throws -> Int {
        var port: Int?
        try await waitUntil("the admin server of \(worker.logPath) to listen") {
            guard let line = worker.log.split(separator: "\n").first(where: { $0.contains("admin HTTP server listening") }),
                let range = line.range(of: #"admin\.port=\d+"#, options: .regularExpression)
            else { return false }
            port = Int(line[range].dropFirst("admin.port=".count))
            return port != nil
        }
        return try #require(port)
    }

    static func http(_ method: String, _ port: Int, _ path: String) async throws -> (status: Int, body: String) {
        let result = try await runProcess(curl, ["-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}", "http://127.0.0.1:\(port)\(path)"])
        guard result.status == 0, let newline = result.stdout.lastIndex(of: "\n") else {
            throw TestSupportError("curl \(method) \(path) failed: \(result.stderr)")
        }
        return (Int(result.stdout[result.stdout.index(after: newline)...]) ?? 0, String(result.stdout[..<newline]))
    }

    /// `report` as `apns-worker fleet --json` wrote it with Foundation's `.iso8601` dates (ICU's
    /// on Linux), before it wrote them by `RFC3339`: the oracle for its bytes. The report was read
    /// from its JSON, so its dates are whole seconds.
    static func iso8601JSON(_ report: FleetReport) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(report), as: UTF8.self)
    }

    /// An instance as `FleetJSON` wrote it with Foundation's `.iso8601` dates (ICU's on Linux),
    /// before it wrote them by `RFC3339`: the oracle for each instance of a `GET /api/fleet` page.
    static func iso8601FleetJSON(_ instance: FleetInstance) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(instance), as: UTF8.self)
    }

    /// `GET /api/fleet` of one instance, every page of it (`next` leads on). The view is paged by
    /// instance id and by bytes, and other suites forge megabytes of instances on the shared
    /// broker: this test's own instances ("vm-…") can sort behind a full first page of "forged-…".
    static func wholeFleet(_ port: Int) async throws -> FleetReport {
        var whole: FleetReport?
        var after: String?
        for _ in 0..<100 {
            let query = after.map { "?after=" + $0.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! } ?? ""
            let answer = try await http("GET", port, "/api/fleet" + query)
            #expect(answer.status == 200)
            let page = try FleetJSON.decoder.decode(FleetReport.self, from: Data(answer.body.utf8))
            for instance in page.instances {
                #expect(try answer.body.contains(Self.iso8601FleetJSON(instance)), "\(instance.id): the bytes the `.iso8601` encoder wrote")
            }
            if whole == nil { whole = page } else { whole?.instances += page.instances }
            after = page.next
            if after == nil { break }
        }
        whole?.next = nil
        return try #require(whole)
    }

    /// The whole `GET /api/fleet` of one instance, narrowed to the instances running `bundle`.
    static func fleet(_ port: Int, bundle: String) async throws -> FleetReport {
        var report = try await wholeFleet(port)
        report.instances = report.instances.filter { $0.bundles[bundle] != nil }
        return report
    }

    static func delivered(_ report: FleetReport, _ bundle: String) -> Int {
        report.instances.reduce(0) { $0 + ($1.bundles[bundle]?.delivered ?? 0) }
    }

    /// `apns-worker fleet --json` on the harness's configuration, narrowed like `fleet`.
    static func fleetCommand(_ h: WorkerHarness, wait: String = "2500ms") async throws -> FleetReport {
        let result = try await runProcess(workerExecutable, ["fleet", "--json", "--config", h.configPath, "--wait", wait])
        #expect(result.status == 0, "apns-worker fleet: \(result.stderr)")
        var report = try FleetJSON.decoder.decode(FleetReport.self, from: Data(result.stdout.utf8))
        #expect(try result.stdout == Self.iso8601JSON(report) + "\n", "the bytes the `.iso8601` encoder wrote")
        report.instances = report.instances.filter { $0.bundles[h.bundle] != nil }
        return report
    }

    @Test func threeInstancesSeeEachOtherAndForgetOneKilled() async throws {
        let h = try await Self.harness()
        let workers = try (1...3).map { try h.startWorker("worker-\($0)") }
        defer { for worker in workers { worker.kill9() } }
        let ports = try await [Self.adminPort(workers[0]), Self.adminPort(workers[1]), Self.adminPort(workers[2])]
        let published = 300
        _ = try await h.publishMany(published)
        try await waitUntil("\(published) deliveries", timeout: .seconds(120)) { h.acceptedIDs().distinct.count == published }

        // Every instance's view: three instances whose counts add up to what was published.
        for port in ports {
            try await waitUntil("instance on port \(port) to count all \(published) jobs across three instances", timeout: .seconds(60)) {
                let report = try await Self.fleet(port, bundle: h.bundle)
                // A job is counted before it leaves the in-flight count: a heartbeat between
                // the two shows it in both.
                return report.instances.count == 3 && Self.delivered(report, h.bundle) == published
                    && report.instances.allSatisfy { $0.bundles[h.bundle]?.inFlight == 0 }
            }
            let report = try await Self.fleet(port, bundle: h.bundle)
            #expect(Set(report.instances.map(\.pid)) == Set(workers.map(\.pid)))
            for instance in report.instances {
                #expect(instance.version == "0.1.0")
                #expect(instance.rssBytes > 0)
                #expect(instance.lastSeen != nil)
                #expect(instance.bundles[h.bundle]?.held == false)
                #expect(instance.bundles[h.bundle]?.inFlight == 0)
            }
        }
        // The page of one instance lists all three.
        let page = try await Self.http("GET", ports[1], "/")
        #expect(page.status == 200)
        for worker in workers { #expect(page.body.contains("<td>\(worker.pid)</td>"), "pid \(worker.pid) on the page") }
        #expect(page.body.contains(#"<iframe id="graph-frame" src="/fleet/graph""#))
        #expect(page.body.contains("<td>\(published)</td>"), "the fleet total of delivered jobs on the page")
        let graph = try await Self.http("GET", ports[1], "/fleet/graph.svg")
        #expect(graph.status == 200 && graph.body.contains("<polyline"))
        // The CLI, from outside any worker, says the same.
        try await waitUntil("apns-worker fleet to list all three with their totals", timeout: .seconds(60)) {
            let report = try await Self.fleetCommand(h)
            return report.instances.count == 3 && Self.delivered(report, h.bundle) == published
        }

        // The table lists whom it heard while it listened: a beat late on a loaded machine
        // misses a listen, so it is read again until it holds everyone.
        var table = ""
        try await waitUntil("the fleet table to list all three with their totals: \(table)", timeout: .seconds(60)) {
            let result = try await runProcess(workerExecutable, ["fleet", "--config", h.configPath, "--wait", "2500ms"])
            #expect(result.status == 0)
            table = result.stdout
            return workers.allSatisfy { table.contains("\t\($0.pid)\t") }
        }
        #expect(table.contains("\(h.bundle)\t\(published)\t0\t0\t0\t0\trunning"), "the bundle's fleet totals: \(table)")

        // kill -9: the others forget it after three silent intervals (3 s here).
        workers[2].kill9()
        let killed = ContinuousClock.now
        for port in ports.prefix(2) {
            try await waitUntil("the killed instance to leave the list of port \(port)", timeout: .seconds(60)) {
                try await Self.fleet(port, bundle: h.bundle).instances.map(\.pid).sorted() == workers.prefix(2).map(\.pid).sorted()
            }
        }
        // Not an assertion (a loaded machine polls late); the 3-interval rule itself is FleetTests'.
        print("fleet: the killed instance was forgotten after \(ContinuousClock.now - killed) (heartbeat interval 1 s)")
        for worker in workers.prefix(2) {
            worker.signal(SIGTERM)
            #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        }
        await h.shutdown()
    }

    @Test func pauseAndResumeAcrossTwoInstancesAndARestart() async throws {
        let h = try await Self.harness()
        var workers = try [h.startWorker("worker-1"), h.startWorker("worker-2")]
        defer { for worker in workers { worker.kill9() } }
        var ports = try await [Self.adminPort(workers[0]), Self.adminPort(workers[1])]
        try await waitUntil("both instances in the fleet") { try await Self.fleet(ports[0], bundle: h.bundle).instances.count == 2 }

        // Paused from the CLI: both instances stop consuming, and say so.
        let pause = try await runProcess(workerExecutable, ["pause", "--bundle", h.bundle, "--config", h.configPath])
        #expect(pause.status == 0, "apns-worker pause: \(pause.stderr)")
        for port in ports {
            try await waitUntil("port \(port) to report the bundle paused on both instances") {
                let report = try await Self.fleet(port, bundle: h.bundle)
                return report.paused.contains(h.bundle) && report.instances.count == 2
                    && report.instances.allSatisfy { $0.bundles[h.bundle]?.paused == true }
            }
        }
        try await waitUntil("no consumer on the work queue") { try await h.connection.inspectQueue(h.workQueue).consumerCount == 0 }
        let ids = try await h.publishMany(20)
        try await Task.sleep(for: .seconds(3))
        #expect(h.acceptedIDs().distinct.isEmpty, "nothing delivered while paused")
        #expect(try await h.messageCount(h.workQueue) == 20)
        // A pause is an operator's choice, not a fault.
        #expect(try await Self.http("GET", ports[0], "/ready").status == 200)
        let page = try await Self.http("GET", ports[1], "/")
        #expect(page.body.contains(#"id="paused-alert""#) && page.body.contains(h.bundle))

        // Restarted while paused: the new process reads the marker and never consumes.
        workers[1].signal(SIGTERM)
        #expect(await workers[1].waitForExit(timeout: .seconds(30)) == 0)
        workers[1] = try h.startWorker("worker-2-restarted")
        ports[1] = try await Self.adminPort(workers[1])
        try await waitUntil("the restarted instance to report the bundle paused") {
            let report = try await Self.fleet(ports[1], bundle: h.bundle)
            return report.instances.contains { $0.pid == workers[1].pid && $0.bundles[h.bundle]?.paused == true }
        }
        try await Task.sleep(for: .seconds(2))
        #expect(h.acceptedIDs().distinct.isEmpty, "nothing delivered by the restarted instance")
        #expect(try await h.connection.inspectQueue(h.workQueue).consumerCount == 0)

        // Resumed from the other instance's admin API: the jobs go through.
        let resume = try await Self.http("POST", ports[0], "/api/bundles/\(h.bundle)/resume")
        #expect(resume.status == 200, "resume: \(resume.body)")
        try await waitUntil("the 20 jobs delivered after the resume", timeout: .seconds(60)) { h.acceptedIDs().distinct.count == 20 }
        #expect(h.acceptedIDs().distinct == Set(ids.map { $0.uuidString.lowercased() }))
        for port in ports {
            try await waitUntil("port \(port) to report the bundle running again") {
                let report = try await Self.fleet(port, bundle: h.bundle)
                return !report.paused.contains(h.bundle) && report.instances.allSatisfy { $0.bundles[h.bundle]?.paused == false }
            }
        }
        try await waitUntil("both instances consuming again") { try await h.connection.inspectQueue(h.workQueue).consumerCount == 2 }

        // Paused through the API of one, resumed with the CLI.
        #expect(try await Self.http("POST", ports[1], "/api/bundles/\(h.bundle)/pause").status == 200)
        try await waitUntil("the API's pause to reach both instances") { try await h.connection.inspectQueue(h.workQueue).consumerCount == 0 }
        #expect(try await runProcess(workerExecutable, ["resume", "--bundle", h.bundle, "--url", h.broker.amqpURL]).status == 0)
        try await waitUntil("the CLI's resume to reach both instances") { try await h.connection.inspectQueue(h.workQueue).consumerCount == 2 }
        // A bundle ID that is no bundle ID is refused, not made into a queue name.
        #expect(try await Self.http("POST", ports[0], "/api/bundles/no%20such%20bundle/pause").status == 400)

        for worker in workers {
            worker.signal(SIGTERM)
            #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
        }
        await h.shutdown()
    }
}
