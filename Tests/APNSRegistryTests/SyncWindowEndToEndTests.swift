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

/// Contract §6's sync window end to end: real `apns-worker run` processes, the real broker, a
/// real PostgreSQL and the APNs simulator. Windows are long enough (10 to 15 s) that a slow
/// machine still handles a burst inside one; every wait polls with a long deadline.
extension RegistryBrokerSuites {
@Suite(.serialized, .enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct SyncWindowEndToEndTests {
    static func background(_ group: String, _ id: UUID, n: Int, except: [String] = []) -> String {
        let excluded = except.map { "\"\($0)\"" }.joined(separator: ",")
        return #"{"group":"\#(group)","id":"\#(id)","payload":{"aps":{"content-available":1},"n":\#(n)},"except":[\#(excluded)]}"#
    }

    static func id(_ job: UUID, _ bundle: String, _ token: String) -> String {
        UUIDv5.fanOutJobID(groupJobID: job, bundleID: bundle, token: token).uuidString.lowercased()
    }

    /// The pushes the simulator accepted for one device, in arrival order: (apns-id, payload's n).
    static func pushes(_ harness: RegistryHarness, _ bundle: String, _ token: String) -> [(id: String, n: Int?)] {
        harness.simulator.accepted().filter { $0.topic == bundle && $0.token.lowercased() == token }.sorted { $0.receivedAt < $1.receivedAt }.map {
            let object = try? JSONSerialization.jsonObject(with: Data($0.payload)) as? [String: Any]
            return ($0.apnsID.lowercased(), object?["n"] as? Int)
        }
    }

    /// Waits until the registry shows `job` merged as the trailing push of `device`.
    static func waitMerged(_ store: RegistryStore, group: String, _ device: String, _ job: UUID) async throws {
        try await waitUntil("group job merged", timeout: .seconds(120)) {
            try await store.activeDevicesWithWindows(group: group, after: nil, limit: 100).devices.contains {
                $0.device.token == device && $0.window.trailing == job
            }
        }
    }

    /// A burst of background group jobs: each device gets one push at once and one trailing push
    /// with the latest group job that included it; `except` applies per group job; an alert group
    /// job in the middle of the window goes out at once, untouched; the counts say so.
    @Test func aBurstIsOneImmediateAndOneTrailingPushPerDevice() async throws {
        // Four group jobs, each published once the last is merged, and an alert must all fall
        // inside the first push's window; on a loaded machine 10 s was too short for that.
        let harness = try await RegistryHarness.start(syncWindow: "30s")
        try await harness.withWorkers { _ in
            let (universal, iphone) = (harness.bundles[0], harness.bundles[1])
            let t = (0..<5).map(RegistryHarness.token)
            let devices = [(universal, t[0]), (universal, t[1]), (iphone, t[2]), (iphone, t[3]), (iphone, t[4])]
            for (bundle, token) in devices { try await harness.register(bundle, token, group: "burst", at: 10) }
            let jobs = (0..<5).map { _ in UUID() }
            try await TestPostgres.withStore(harness.registry) { store in
                try await waitUntil("registrations applied", timeout: .seconds(120)) {
                    try await store.activeDevices(group: "burst", after: nil, limit: 10).count == 5
                }
                // t[3] is in no group job; t[4] is left out of the first, so the second opens its
                // window; t[1] is left out of the last, so its trailing push carries the fourth.
                let except: [[String]] = [[t[3], t[4]], [t[3]], [t[3]], [t[3]], [t[3], t[1].uppercased()]]
                try await harness.publish(TopologyNames.groups, Self.background("burst", jobs[0], n: 0, except: except[0]))
                try await waitUntil("the first pushes", timeout: .seconds(120)) { harness.simulator.accepted().count == 3 }
                for k in 1..<5 {
                    try await harness.publish(TopologyNames.groups, Self.background("burst", jobs[k], n: k, except: except[k]))
                    try await Self.waitMerged(store, group: "burst", t[0], jobs[k])
                }
            }
            // An alert group job is never coalesced: it goes out at once, inside the window.
            let alert = UUID()
            try await harness.publish(TopologyNames.groups, #"{"group":"burst","id":"\#(alert)","payload":{"aps":{"alert":"hi"}}}"#)
            // Immediate: 3 of the first group job and t[4]'s of the second; 5 alerts; 4 trailing.
            try await waitUntil("the trailing pushes", timeout: .seconds(180)) { harness.simulator.accepted().count == 4 + 5 + 4 }
            // Long enough for a second trailing push to show up if one were wrongly due.
            try await Task.sleep(for: .seconds(2))
            #expect(harness.simulator.accepted().count == 13)
            let expected: [(bundle: String, token: String, first: Int?, last: Int?)] = [
                (universal, t[0], 0, 4), (universal, t[1], 0, 3), (iphone, t[2], 0, 4), (iphone, t[3], nil, nil), (iphone, t[4], 1, 4),
            ]
            for (bundle, token, first, last) in expected {
                let got = Self.pushes(harness, bundle, token)
                let background = got.filter { $0.id != Self.id(alert, bundle, token) }
                #expect(got.count - background.count == 1, "the alert group job reached \(token.prefix(6)) once")
                guard let first, let last else {
                    #expect(background.isEmpty)
                    continue
                }
                #expect(background.map(\.id) == [Self.id(jobs[first], bundle, token), Self.id(jobs[last], bundle, token)])
                #expect(background.map(\.n) == [first, last])
            }
            try await TestPostgres.withStore(harness.registry) { store in
                try await waitUntil("counts flushed", timeout: .seconds(60)) {
                    let rows = try await store.counts(sinceEpochSeconds: 0)
                    func sum(_ end: String) -> Int64 { rows.filter { $0.end == end }.reduce(0) { $0 + $1.count } }
                    // Immediate: 3 + 1 + 5 alerts; merged: 3 + 4 + 4 + 3 (t[4] from the third on); trailing: 4.
                    return sum("fannedOut") == 9 && sum("coalesced") == 14 && sum("trailing") == 4 && sum("delivered") == 13
                }
            }
        }
    }

    /// Two instances fan out a burst for one group at once: still one immediate and one
    /// trailing push per device, fleet-wide.
    @Test func twoInstancesShareTheWindows() async throws {
        let harness = try await RegistryHarness.start(syncWindow: "15s")
        try await harness.withWorkers(["a", "b"]) { _ in
            let bundle = harness.bundles[0]
            let tokens = (10..<40).map(RegistryHarness.token)
            for token in tokens { try await harness.register(bundle, token, group: "shared", at: 10) }
            try await TestPostgres.withStore(harness.registry) { store in
                try await waitUntil("registrations applied", timeout: .seconds(120)) {
                    try await store.activeDevices(group: "shared", after: nil, limit: 100).count == tokens.count
                }
            }
            let jobs = (0..<12).map { _ in UUID() }
            for (k, job) in jobs.enumerated() { try await harness.publish(TopologyNames.groups, Self.background("shared", job, n: k)) }
            try await waitUntil("every device's two pushes", timeout: .seconds(180)) {
                harness.simulator.accepted().count >= 2 * tokens.count
            }
            try await Task.sleep(for: .seconds(2))
            #expect(harness.simulator.accepted().count == 2 * tokens.count)
            let jobIDs = Set(jobs.map { $0 })
            for token in tokens {
                let got = Self.pushes(harness, bundle, token)
                #expect(got.count == 2)
                let ids = Set(jobIDs.map { Self.id($0, bundle, token) })
                #expect(got.allSatisfy { ids.contains($0.id) })
            }
            try await TestPostgres.withStore(harness.registry) { store in
                try await waitUntil("counts flushed", timeout: .seconds(60)) {
                    let rows = try await store.counts(sinceEpochSeconds: 0)
                    func sum(_ end: String) -> Int64 { rows.filter { $0.end == end }.reduce(0) { $0 + $1.count } }
                    return sum("fannedOut") == Int64(tokens.count) && sum("coalesced") == Int64(tokens.count * 11)
                        && sum("trailing") == Int64(tokens.count)
                }
            }
        }
    }

    /// `kill -9` of every instance while a trailing push waits; it falls due while none runs;
    /// an instance started afterwards sends it.
    @Test func aTrailingPushDueWhileEveryInstanceWasDownGoesOutOnRestart() async throws {
        let harness = try await RegistryHarness.start(syncWindow: "10s")
        let bundle = harness.bundles[0]
        let token = RegistryHarness.token(7)
        let (first, latest) = (UUID(), UUID())
        let workers = [try harness.startWorker("a"), try harness.startWorker("b")]
        do {
            try await harness.register(bundle, token, group: "down", at: 10)
            try await TestPostgres.withStore(harness.registry) { store in
                try await waitUntil("registration applied", timeout: .seconds(120)) {
                    try await store.activeDevices(group: "down", after: nil, limit: 10).count == 1
                }
                try await harness.publish(TopologyNames.groups, Self.background("down", first, n: 1))
                try await waitUntil("the immediate push", timeout: .seconds(120)) { harness.simulator.accepted().count == 1 }
                try await harness.publish(TopologyNames.groups, Self.background("down", latest, n: 2))
                try await Self.waitMerged(store, group: "down", token, latest)
            }
        } catch {
            for worker in workers { worker.kill9() }
            await harness.shutdown()
            throw error
        }
        for worker in workers {
            worker.kill9()
            _ = await worker.waitForExit(timeout: .seconds(30))
        }
        try await TestPostgres.withStore(harness.registry) { store in
            try await waitUntil("the window ended with every instance down", timeout: .seconds(120), every: .milliseconds(500)) {
                let page = try await store.activeDevicesWithWindows(group: "down", after: nil, limit: 10)
                return page.devices.allSatisfy { ($0.window.windowEnd ?? .max) < page.now }
            }
        }
        #expect(harness.simulator.accepted().count == 1, "nothing sends it while every instance is down")
        try await harness.withWorkers(["restarted"]) { _ in
            try await waitUntil("the trailing push after the restart", timeout: .seconds(120)) { harness.simulator.accepted().count == 2 }
            #expect(Self.pushes(harness, bundle, token).map(\.id) == [Self.id(first, bundle, token), Self.id(latest, bundle, token)])
        }
    }
}
}
