import AMQPClient
import APNSModel
import APNSSimulator
import APNSTopologyNames
import APNSWorker
import Foundation
import Testing
import TestSupport

/// Apple's key rules at run time, through the real broker, the real `apns-worker` process and the
/// simulator: a job whose topic the bundle's topic-specific key does not list (a VoIP push, topic
/// `<bundle>.voip`; the loader only checks the bundle ID itself) is not sent. The bundle holds
/// with Apple's reason, its jobs wait in the broker (none dead, none lost), the other bundle keeps
/// delivering, and once a reload widens the key's topics each held job is delivered once.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the broker that scripts/test starts"))
struct KeyScopeHoldEndToEndTests {
    @Test func aJobOutsideItsKeysTopicsIsHeldUnsentAndDeliveredOnceAfterTheScopeIsFixed() async throws {
        var options = WorkerHarness.Options()
        options.extraBundles = 1
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: options)
        let (a, b) = (h.bundles[0], h.bundles[1])
        let config = ReloadEndToEndTests.Config(h: h)
        // One key for both bundles, so one scope in both sections.
        func scoped(_ topics: [String]) -> String {
            config.tokenSection() + "\nkeyEnvironment = production\nkeyTopics = \(topics.joined(separator: ", "))"
        }
        try config.write([(a, scoped([a, b])), (b, scoped([a, b]))])
        // Debug: each job's end line, for the account a failure prints.
        let worker = try h.startWorker(logLevel: "debug")
        defer { worker.kill9() }
        func accepted(topic: String) -> [String: Int] {
            h.simulator.accepted().filter { $0.topic == topic }.reduce(into: [:]) { $0[$1.apnsID.lowercased(), default: 0] += 1 }
        }

        let alerts = try await ReloadEndToEndTests.publish(h, 5, to: a, from: 0)
        try await waitUntil("a's alerts, inside the key's topics") { accepted(topic: a).count == 5 }

        var voip: [String] = []
        for n in 100..<110 {
            let id = try await h.publishJob(token: WorkerHarness.token(n), extra: #","pushType":"voip""#, bundle: a)
            voip.append(id.uuidString.lowercased())
        }
        try await waitUntil("a held with Apple's reason", timeout: .seconds(60)) {
            worker.log.contains("bundle HELD") && worker.log.contains("apns.reason=TopicDisallowed")
        }
        // The other bundle keeps delivering while a is held.
        let others = try await ReloadEndToEndTests.publish(h, 20, to: b, from: 1_000)
        try await waitUntil("b's jobs while a is held") { accepted(topic: b).count == 20 }
        try await waitUntil("a's VoIP jobs waiting in its queue") { try await h.messageCount(TopologyNames.workQueue(a)) == 10 }
        #expect(accepted(topic: a + ".voip").isEmpty, "nothing outside the key's scope was sent")
        #expect(h.simulator.counters().count(.topicDisallowed) == 0, "refused by the worker, not by Apple")
        #expect(try await h.messageCount(TopologyNames.deadQueue(a)) == 0)

        // The scope fixed: the held jobs are delivered, each once.
        try config.write([(a, scoped([a, a + ".voip", b])), (b, scoped([a, a + ".voip", b]))])
        worker.signal(SIGHUP)
        try await ReloadEndToEndTests.waitForApplied(worker, count: 1, containing: "[apns \"\(a)\"] keyTopics")
        try await waitUntil("every held job", timeout: .seconds(60)) { accepted(topic: a + ".voip").count == 10 }
        try await waitUntil("a's queue empty") { try await h.messageCount(TopologyNames.workQueue(a)) == 0 }

        #expect(Set(accepted(topic: a + ".voip").keys) == Set(voip))
        // Once each when nothing failed on the way; if a CI run ever sees one twice, the worker's
        // own account of the hold (its probes, warnings and errors) says why.
        let twice = accepted(topic: a + ".voip").filter { $0.value > 1 }
        #expect(twice.isEmpty, "no held job sent twice: \(twice)\n\(Self.holdAccount(worker.log))")
        #expect(Set(accepted(topic: a).keys) == Set(alerts))
        #expect(Set(accepted(topic: b).keys) == Set(others))
        #expect(accepted(topic: b).values.allSatisfy { $0 == 1 })
        for bundle in [a, b] {
            #expect(try await h.messageCount(TopologyNames.deadQueue(bundle)) == 0)
        }
        worker.signal(SIGTERM)
        #expect(await worker.waitForExit(timeout: .seconds(20)) == 0)
        await h.shutdown()
    }

    /// The worker's log lines about holding, probing, reloading, every job's end, and anything it
    /// warned of.
    static func holdAccount(_ log: String) -> String {
        log.split(separator: "\n").filter { line in
            [" warning ", " error ", " notice ", "probing held bundle", "pipeline st", "job.end="].contains {
                line.contains($0)
            }
        }.joined(separator: "\n")
    }
}
