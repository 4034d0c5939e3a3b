import AMQPClient
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

/// A configuration change read while the broker is away (contract §3, "Changes while running",
/// and the promise that a dependency that is down only pauses the work that needs it): the
/// change waits for the broker and is applied when it returns, without another edit or signal.
/// Each on a broker of its own, stopped and started under the running `apns-worker`.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs rabbitmq-server, as scripts/test provides"))
struct ReloadOutageEndToEndTests {
    /// A bundle added by SIGHUP while the broker is stopped: its topology cannot be declared
    /// then, so the change waits (said once), and once the broker is back the bundle is
    /// consumed and its jobs delivered. The change used to be dropped with one error line until
    /// the file changed again: the bundle configured, never run.
    @Test func aBundleAddedWhileTheBrokerIsAwayIsRunOnceItIsBack() async throws {
        try await withPrivateBroker { broker in
            var options = WorkerHarness.Options()
            options.extraBundles = 1
            let h = try await WorkerHarness.start(broker: broker.coordinates, options: options)
            let (a, b) = (h.bundles[0], h.bundles[1])
            let config = ReloadEndToEndTests.Config(h: h)
            try config.write([(a, config.tokenSection())])
            let worker = try h.startWorker()
            defer { worker.kill9() }
            let first = try await ReloadEndToEndTests.publish(h, 5, to: a, from: 0)
            try await waitUntil("A's first jobs") { ReloadEndToEndTests.acceptances(h, bundle: a).count == 5 }

            try await broker.coordinates.ctl("stop_app")
            try config.write([(a, config.tokenSection()), (b, config.tokenSection())])
            worker.signal(SIGHUP)
            try await waitUntil("the change waiting for the broker") { worker.log.contains("configuration change waits for the broker") }
            try await broker.coordinates.ctl("start_app")

            // No edit and no signal after the broker's return: the waiting change is applied.
            try await ReloadEndToEndTests.waitForApplied(worker, count: 1, containing: "added [apns \"\(b)\"]")
            // The test's own connection reconnects on its own schedule (backing off to 30 s).
            try await waitUntil("the test's connection back", timeout: .seconds(120)) {
                (try? await h.connection.inspectQueue(TopologyNames.workQueue(b))) != nil
            }
            let idsB = try await ReloadEndToEndTests.publish(h, 10, to: b, from: 100)
            try await waitUntil("B's jobs delivered", timeout: .seconds(120)) {
                ReloadEndToEndTests.acceptances(h, bundle: b).count == 10
            }
            #expect(Set(ReloadEndToEndTests.acceptances(h, bundle: b).keys) == Set(idsB))
            #expect(Set(ReloadEndToEndTests.acceptances(h, bundle: a).keys) == Set(first))
            #expect(ReloadEndToEndTests.occurrences("configuration change waits for the broker", in: worker.log) == 1, "said once")
            #expect(try await h.messageCount(TopologyNames.deadQueue(b)) == 0)
            #expect(worker.isRunning)
            worker.signal(SIGTERM)
            #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
            await h.shutdown()
        }
    }
}
