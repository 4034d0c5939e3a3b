import AMQPClient
import APNSConfig
import APNSModel
import APNSRegistryMessages
import APNSSimulator
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

@testable import APNSRegistry

/// Contract §6 end to end: real `apns-worker run` processes, the real broker, a real PostgreSQL
/// and the APNs simulator. §6's queue names are global, so these run one at a time.
extension RegistryBrokerSuites {
@Suite(.serialized, .enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct RegistryEndToEndTests {
    @Test func groupJobReachesEveryActiveDeviceAcrossTwoBundles() async throws {
        let harness = try await RegistryHarness.start()
        try await harness.withWorkers { _ in
            let (universal, iphone) = (harness.bundles[0], harness.bundles[1])
            let t = (0..<5).map(RegistryHarness.token)
            try await harness.register(universal, t[0], group: "acct", at: 10)
            try await harness.register(universal, t[1], group: "acct", at: 10)
            try await harness.register(iphone, t[2].uppercased(), group: "acct", at: 10)
            try await harness.register(iphone, t[3], group: "acct", at: 10)  // the device that made the change
            try await harness.register(iphone, t[4], group: "acct", at: 10)  // Apple said it is invalid
            try await harness.register(iphone, RegistryHarness.token(99), group: "other", at: 10)
            try await TestPostgres.withStore(harness.registry) { store in
                try await waitUntil("registrations applied", timeout: .seconds(120)) {
                    try await store.activeDevices(group: "acct", after: nil, limit: 10).count == 5
                }
                try await store.markInvalid([InvalidMark(bundleID: iphone, token: t[4], reason: "Unregistered", at: 20)])
            }
            let groupJobID = UUID()
            try await harness.publish(
                TopologyNames.groups,
                #"{"group":"acct","id":"\#(groupJobID)","payload":{"aps":{"content-available":1}},"except":["\#(t[3].uppercased())"],"userInfo":{"syncServer":"s1"}}"#)
            try await waitUntil("the three other active devices notified", timeout: .seconds(120)) {
                harness.accepted(universal).count == 2 && harness.accepted(iphone).count == 1
            }
            #expect(Set(harness.accepted(universal).keys) == [t[0], t[1]])
            #expect(Set(harness.accepted(iphone).keys) == [t[2]])
            let ids = Set(harness.simulator.accepted().map { $0.apnsID.lowercased() })
            let expected: Set<String> = [
                UUIDv5.fanOutJobID(groupJobID: groupJobID, bundleID: universal, token: t[0]).uuidString.lowercased(),
                UUIDv5.fanOutJobID(groupJobID: groupJobID, bundleID: universal, token: t[1]).uuidString.lowercased(),
                UUIDv5.fanOutJobID(groupJobID: groupJobID, bundleID: iphone, token: t[2]).uuidString.lowercased(),
            ]
            #expect(ids == expected)
            // Counts reach PostgreSQL within a flush interval or so.
            try await TestPostgres.withStore(harness.registry) { store in
                try await waitUntil("counts flushed", timeout: .seconds(60)) {
                    let rows = try await store.counts(sinceEpochSeconds: 0)
                    let fanned = rows.filter { $0.end == "fannedOut" }.reduce(0) { $0 + $1.count }
                    let delivered = rows.filter { $0.end == "delivered" }.reduce(0) { $0 + $1.count }
                    return fanned == 3 && delivered == 3
                }
            }
            #expect(try await harness.messageCount(TopologyNames.groupsDead) == 0)
        }
    }

    @Test func malformedMessagesGoToTheDeadQueuesUnchanged() async throws {
        let harness = try await RegistryHarness.start()
        try await harness.withWorkers { _ in try await malformed(harness) }
    }

    func malformed(_ harness: RegistryHarness) async throws {
        let badRegistration = #"{"op":"register","bundleId":"com.a","token":"zz","group":"g","at":1}"#
        let badGroupJob = #"{"group":"acct","payload":{"aps":{}},"priority":7}"#
        try await harness.publish(TopologyNames.registry, badRegistration, messageID: "reg-1")
        try await harness.publish(TopologyNames.groups, badGroupJob, messageID: "grp-1")
        try await waitUntil("both dead-lettered", timeout: .seconds(120)) {
            let registryDead = try await harness.messageCount(TopologyNames.registryDead)
            let groupsDead = try await harness.messageCount(TopologyNames.groupsDead)
            return registryDead == 1 && groupsDead == 1
        }
        for (queue, body, field) in [(TopologyNames.registryDead, badRegistration, "token"), (TopologyNames.groupsDead, badGroupJob, "priority")] {
            let dead = try #require(try await harness.connection.get(queue: queue))
            await harness.connection.ack(dead)
            ContractCapture.record(dead, from: queue)
            #expect(dead.message.body == Array(body.utf8))
            let headers = dead.message.properties.headers ?? [:]
            #expect(headers[JobHeaders.reason]?.stringValue == "MalformedJob")
            #expect(headers[JobHeaders.status]?.intValue == 0)
            #expect(headers[JobHeaders.failedAt]?.stringValue != nil)
            #expect(headers[JobHeaders.error]?.stringValue?.hasPrefix(field) == true)
        }
    }

    /// Two workers consume `apns.registry` at once; every device's messages arrive shuffled.
    @Test func competingWorkersEndInTheNewestState() async throws {
        let harness = try await RegistryHarness.start()
        try await harness.withWorkers(["a", "b"]) { _ in try await competing(harness) }
    }

    func competing(_ harness: RegistryHarness) async throws {
        let bundle = harness.bundles[0]
        var newest: [String: (op: String, group: String?)] = [:]
        var messages: [(String, String, Int64, String?)] = []  // (op, token, at, group)
        for device in 0..<40 {
            let token = RegistryHarness.token(device)
            for step in 0..<5 {
                let register = (device + step) % 3 != 0
                let group = register ? "g\(step)" : nil
                messages.append((register ? "register" : "unregister", token, Int64(100 + step), group))
                if step == 4 { newest[token] = (register ? "register" : "unregister", group) }
            }
        }
        for (op, token, at, group) in messages.shuffled() {
            if op == "register" {
                try await harness.register(bundle, token, group: group!, at: at)
            } else {
                try await harness.unregister(bundle, token, at: at)
            }
        }
        let finalStates = newest
        try await TestPostgres.withStore(harness.registry) { store in
            // Every device's newest message has at = 104: once all show it, every message is in.
            try await waitUntil("every device at its newest change", timeout: .seconds(120)) {
                for token in finalStates.keys where try await store.device(bundleID: bundle, token: token)?.changedAt != 104 { return false }
                return true
            }
            for (token, last) in finalStates {
                let device = try #require(try await store.device(bundleID: bundle, token: token))
                #expect(device.changedAt == 104)
                #expect(device.state == (last.op == "register" ? .active : .unregistered))
                if last.op == "register" { #expect(device.group == last.group) }
            }
        }
        #expect(try await harness.messageCount(TopologyNames.registryDead) == 0)
    }

    @Test func invalidTokenAnswerMarksTheDeviceAndARegisterClearsIt() async throws {
        let harness = try await RegistryHarness.start()
        try await harness.withWorkers { _ in try await invalidToken(harness) }
    }

    func invalidToken(_ harness: RegistryHarness) async throws {
        let bundle = harness.bundles[1]
        let token = RegistryHarness.token(7)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        harness.simulator.script(token: token, .unregistered(timestamp: now))
        try await harness.register(bundle, token, group: "acct", at: now - 60_000)
        try await TestPostgres.withStore(harness.registry) { store in
            try await waitUntil("registered", timeout: .seconds(120)) {
                try await store.device(bundleID: bundle, token: token)?.state == .active
            }
            try await harness.publish(TopologyNames.groups, #"{"group":"acct","payload":{"aps":{"alert":"hi"}}}"#)
            try await waitUntil("marked invalid with Apple's reason and timestamp", timeout: .seconds(120)) {
                let device = try await store.device(bundleID: bundle, token: token)
                return device?.state == .invalid && device?.invalidReason == "Unregistered" && device?.invalidAt == now
            }
            try await harness.register(bundle, token, group: "acct", at: now + 1_000)
            try await waitUntil("a later register clears the mark", timeout: .seconds(120)) {
                try await store.device(bundleID: bundle, token: token)?.state == .active
            }
        }
    }

    /// A fan-out killed with SIGKILL half-way and redone by another worker publishes the same
    /// job ids and loses none. The devices' bundle is served by no worker: their jobs wait in
    /// a queue of the test's own, bound to `apns.jobs`, where they are counted.
    @Test func killedFanOutIsRedoneWithTheSameIds() async throws {
        let harness = try await RegistryHarness.start()
        try await harness.withWorkers([]) { _ in try await killedFanOut(harness) }
    }

    func killedFanOut(_ harness: RegistryHarness) async throws {
        let bundle = uniqueName("com.example.elsewhere")
        let sink = uniqueName("registry-e2e.sink")
        _ = try await harness.connection.declareQueue(QueueDeclaration(name: sink))
        try await harness.connection.bind(BindingDeclaration(queue: sink, exchange: TopologyNames.jobsExchange, routingKey: bundle))
        let devices = 20_000
        try await TestPostgres.withStore(harness.registry) { store in
            try await store.migrate()
            try await store.importDevices(bundleID: bundle, tokens: (0..<devices).map(RegistryHarness.token), group: "big-kill", at: 1)
        }
        let groupJobID = UUID()
        try await harness.publish(TopologyNames.groups, #"{"group":"big-kill","id":"\#(groupJobID)","payload":{"aps":{"content-available":1}}}"#)
        let expected = Set((0..<devices).map {
            UUIDv5.fanOutJobID(groupJobID: groupJobID, bundleID: bundle, token: RegistryHarness.token($0)).uuidString.lowercased()
        })
        var ids: [String] = []
        func drainSink() async throws {
            while let delivery = try await harness.connection.get(queue: sink) {
                ids.append(delivery.message.properties.messageID ?? "")
                ContractCapture.record(kind: ContractCapture.job, json: delivery.message.body)
                await harness.connection.ack(delivery)
            }
        }
        let first = try harness.startWorker("first")
        do {
            try await waitUntil("the fan-out under way", timeout: .seconds(120), every: .milliseconds(20)) {
                try await harness.messageCount(sink) > 0
            }
        } catch {
            first.kill9()
            print(first.log.split(separator: "\n").suffix(40).joined(separator: "\n"))
            throw error
        }
        first.kill9()
        _ = await first.waitForExit(timeout: .seconds(30))
        try await drainSink()
        let killedAt = Set(ids).count
        let second = try harness.startWorker("second")
        do {
            try await waitUntil("every device's job published", timeout: .seconds(300), every: .milliseconds(500)) {
                try await drainSink()
                return Set(ids).isSuperset(of: expected)
            }
        } catch {
            second.kill9()
            print(second.log.split(separator: "\n").suffix(40).joined(separator: "\n"))
            throw error
        }
        await harness.stop(second)
        try await drainSink()
        #expect(Set(ids) == expected, "unexpected ids: \(Set(ids).subtracting(expected).count)")
        print("fan-out killed after \(killedAt) of \(devices) jobs; redone: \(ids.count) published in all")
        #expect(try await harness.messageCount(TopologyNames.groupsDead) == 0)
        _ = try? await harness.connection.deleteQueue(sink)
    }

    /// The binary transport's two ways of saying a token is dead, status 8 on the gateway and
    /// a tuple from the feedback service, both mark the device, each with its own reason and
    /// time, and the marked devices get no further fan-out.
    @Test func binaryStatusEightAndTheFeedbackServiceMarkDevices() async throws {
        let harness = try await RegistryHarness.start(binarySecondBundle: true)
        try await harness.withWorkers { _ in try await binaryMarks(harness) }
    }

    func binaryMarks(_ harness: RegistryHarness) async throws {
        let bundle = harness.bundles[1]
        let rejected = RegistryHarness.token(21), reported = RegistryHarness.token(22), healthy = RegistryHarness.token(23)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        harness.simulator.script(token: rejected, .binaryStatus(8))
        for token in [rejected, reported, healthy] { try await harness.register(bundle, token, group: "binary-acct", at: now - 60_000) }
        try await TestPostgres.withStore(harness.registry) { store in
            try await waitUntil("registered", timeout: .seconds(120)) {
                try await store.activeDevices(group: "binary-acct", after: nil, limit: 10).count == 3
            }
            // The feedback service's time is in seconds; Apple's timestamp is after the register.
            let feedbackSeconds = UInt32(now / 1000)
            harness.simulator.addFeedback(token: reported, timestamp: feedbackSeconds)
            try await harness.publish(TopologyNames.groups, #"{"group":"binary-acct","payload":{"aps":{"alert":"hi"}}}"#)
            try await waitUntil("status 8 and the feedback tuple both marked", timeout: .seconds(120)) {
                for token in [rejected, reported] where try await store.device(bundleID: bundle, token: token)?.state != .invalid {
                    return false
                }
                return true
            }
            let byStatus = try #require(try await store.device(bundleID: bundle, token: rejected))
            let byFeedback = try #require(try await store.device(bundleID: bundle, token: reported))
            #expect(byStatus.invalidReason == "InvalidToken")
            #expect(byFeedback.invalidReason == "Unregistered")
            #expect(byFeedback.invalidAt == Int64(feedbackSeconds) * 1000)
            #expect(try await store.device(bundleID: bundle, token: healthy)?.state == .active)
            let active = try await store.activeDevices(group: "binary-acct", after: nil, limit: 10)
            #expect(active.map(\.token) == [healthy])
        }
    }

    /// Two workers deliver one bundle's jobs; their counts add up in PostgreSQL, and the
    /// operator surface (`stats`, `registry show`, the admin API and page) shows them.
    @Test func twoWorkersCountsAddUpAndOperatorsSeeThem() async throws {
        let harness = try await RegistryHarness.start()
        try await harness.withWorkers(["a", "b"]) { workers in try await counts(harness, workers) }
    }

    func counts(_ harness: RegistryHarness, _ workers: [ChildProcess]) async throws {
        let bundle = harness.bundles[0]
        let jobs = 300
        // Both consumers registered before the first job, so the broker spreads the jobs over both.
        var ports: [Int] = []
        for worker in workers {
            try await waitUntil("\(worker.logPath) ready", timeout: .seconds(120)) {
                guard let port = RegistryHarness.adminPort(worker) else { return false }
                return (try? await runProcess("/usr/bin/curl", ["-fsS", "http://127.0.0.1:\(port)/ready"]))?.status == 0
            }
            ports.append(try #require(RegistryHarness.adminPort(worker)))
        }
        let tokens = (1_000..<(1_000 + jobs)).map(RegistryHarness.token)
        for token in tokens {
            var properties = AMQPProperties.persistentJSON
            properties.messageID = UUID().uuidString
            try await harness.connection.publishAgainAfterNacks(
                AMQPOutboundMessage(
                    exchange: TopologyNames.jobsExchange, routingKey: bundle,
                    body: Array(#"{"token":"\#(token)","payload":{"aps":{"alert":"hi"}}}"#.utf8), properties: properties))
        }
        try await waitUntil("every job delivered", timeout: .seconds(180)) { harness.accepted(bundle).count == jobs }
        try await TestPostgres.withStore(harness.registry) { store in
            try await waitUntil("both workers' counts flushed and summed", timeout: .seconds(60)) {
                let rows = try await store.counts(sinceEpochSeconds: 0)
                return rows.filter { $0.bundleId == bundle && $0.end == "delivered" }.reduce(0) { $0 + $1.count } == Int64(jobs)
            }
        }
        var delivered: [Int] = []
        for port in ports {
            let status = try await runProcess("/usr/bin/curl", ["-fsS", "http://127.0.0.1:\(port)/api/status"])
            let json = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
            let mine = (json?["bundles"] as? [[String: Any]] ?? []).first { $0["bundleID"] as? String == bundle }
            delivered.append((mine?["jobs"] as? [String: Int])?["delivered"] ?? 0)
        }
        #expect(delivered.allSatisfy { $0 > 0 }, "each worker delivered some: \(delivered)")
        #expect(delivered.reduce(0, +) == jobs)

        // apns-worker stats --json
        let stats = try await runProcess(workerExecutable, ["stats", "--config", harness.configPath, "--json"])
        #expect(stats.status == 0, "\(stats.stderr)")
        let statsJSON = try JSONSerialization.jsonObject(with: Data(stats.stdout.utf8)) as? [String: Any]
        let statsDelivered = (statsJSON?["counts"] as? [[String: Any]] ?? []).filter { $0["bundleId"] as? String == bundle && $0["end"] as? String == "delivered" }
            .reduce(0) { $0 + ($1["count"] as? Int ?? 0) }
        #expect(statsDelivered == jobs)

        // A device, seen through `registry show` and the admin API.
        let token = RegistryHarness.token(5)
        try await harness.register(harness.bundles[1], token, group: "ops-group", at: 42)
        try await TestPostgres.withStore(harness.registry) { store in
            try await waitUntil("registered", timeout: .seconds(60)) { try await store.device(bundleID: harness.bundles[1], token: token) != nil }
        }
        let show = try await runProcess(workerExecutable, ["registry", "show", "--config", harness.configPath, "--group", "ops-group"])
        #expect(show.status == 0, "\(show.stderr)")
        #expect(show.stdout.contains(token))
        let port = ports[0]
        let group = try await runProcess("/usr/bin/curl", ["-fsS", "http://127.0.0.1:\(port)/api/registry/groups/ops-group"])
        let groupJSON = try JSONSerialization.jsonObject(with: Data(group.stdout.utf8)) as? [String: Any]
        #expect(groupJSON?["count"] as? Int == 1)
        let device = try await runProcess("/usr/bin/curl", ["-fsS", "http://127.0.0.1:\(port)/api/registry/devices/\(harness.bundles[1])/\(token.uppercased())"])
        let deviceJSON = try JSONSerialization.jsonObject(with: Data(device.stdout.utf8)) as? [String: Any]
        #expect(deviceJSON?["state"] as? String == "active")
        #expect(deviceJSON?["changedAt"] as? Int == 42)
        let page = try await runProcess("/usr/bin/curl", ["-fsS", "http://127.0.0.1:\(port)/registry?group=ops-group"])
        #expect(page.stdout.contains("<svg"))
        #expect(page.stdout.contains(token))
        #expect(page.stdout.contains(bundle))
    }
}
}
