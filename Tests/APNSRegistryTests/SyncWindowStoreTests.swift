import APNSConfig
import APNSModel
import Foundation
import Testing
import TestSupport

@testable import APNSRegistry

/// The sync window's storage against the real PostgreSQL of `scripts/test`: compare-and-set
/// between instances, and trailing pushes claimed once each.
@Suite(.enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct SyncWindowStoreTests {
    let bundle = "com.example.window"
    let tokens = (0..<6).map(RegistryHarness.token)

    func prepared() async throws -> RegistrySettings {
        let settings = try await TestPostgres.freshDatabase()
        let (bundle, tokens) = (bundle, tokens)
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            try await store.importDevices(bundleID: bundle, tokens: tokens, group: "g", at: 1)
        }
        return settings
    }

    /// Decides one page for `job` and stores it, like the fan-out; returns the positions
    /// written and what was decided on the page read.
    static func decideAndWrite(_ store: RegistryStore, window: SyncWindow, job: UUID) async throws -> (written: Set<DevicePosition>, actions: [SyncWindowAction]) {
        let page = try await store.activeDevicesWithWindows(group: "g", after: nil, limit: 100)
        var writes: [SyncWindowWrite] = []
        var actions: [SyncWindowAction] = []
        for windowed in page.devices {
            let action = window.decide(windowed.window, job: job, included: true, now: page.now)
            actions.append(action)
            switch action {
            case .sendNow(let state?): writes.append(SyncWindowWrite(position: windowed.device.position, window: state, trailingBody: nil))
            case .merge(let state?): writes.append(SyncWindowWrite(position: windowed.device.position, window: state, trailingBody: Array("{}".utf8)))
            default: break
            }
        }
        return (try await store.storeWindows(writes), actions)
    }

    /// Two instances read the same devices, both decide to open their windows, both write:
    /// one write per device wins, and the loser, reading again, merges.
    @Test func twoInstancesCannotBothOpenADevicesWindow() async throws {
        let settings = try await prepared()
        let window = SyncWindow(length: .seconds(60))
        let (first, second) = (UUID(), UUID())
        try await TestPostgres.withStore(settings) { a in
            try await TestPostgres.withStore(settings) { b in
                let pageA = try await a.activeDevicesWithWindows(group: "g", after: nil, limit: 100)
                let pageB = try await b.activeDevicesWithWindows(group: "g", after: nil, limit: 100)
                func writes(_ page: (now: Int64, devices: [WindowedDevice]), _ job: UUID) -> [SyncWindowWrite] {
                    page.devices.compactMap { windowed in
                        guard case .sendNow(let state?) = window.decide(windowed.window, job: job, included: true, now: page.now) else { return nil }
                        return SyncWindowWrite(position: windowed.device.position, window: state, trailingBody: nil)
                    }
                }
                async let wroteA = a.storeWindows(writes(pageA, first))
                async let wroteB = b.storeWindows(writes(pageB, second))
                let (winsA, winsB) = try await (wroteA, wroteB)
                #expect(winsA.count + winsB.count == 6)
                #expect(winsA.isDisjoint(with: winsB))
                // The losers read again: their windows are open, so their job merges.
                let lostByB = Array(winsA)
                let again = try await b.windows(of: lostByB)
                for windowed in again.devices {
                    guard case .merge = window.decide(windowed.window, job: second, included: true, now: again.now) else {
                        Issue.record("a device whose window another instance opened must merge")
                        continue
                    }
                }
                #expect(again.devices.count == lostByB.count)
            }
        }
    }

    /// Many writers at once over the same devices, each in its own order (fan-outs of one
    /// group, the trailing pusher): none fails with a deadlock, and each write wins or loses
    /// whole per device, never half.
    @Test func concurrentWritersInAnyOrderNeverDeadlock() async throws {
        let settings = try await prepared()
        let window = SyncWindow(length: .seconds(60))
        for _ in 0..<5 {
            let wins = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        try await TestPostgres.storeValue(settings) { store in
                            let page = try await store.activeDevicesWithWindows(group: "g", after: nil, limit: 100)
                            let job = UUID()
                            let writes = page.devices.map { windowed in
                                var state = windowed.window
                                state.windowEnd = page.now + window.lengthMS
                                state.openedBy = job
                                return SyncWindowWrite(position: windowed.device.position, window: state, trailingBody: nil)
                            }
                            return try await store.storeWindows(writes.shuffled()).count
                        }
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(wins >= 6 && wins <= 6 * 8)
        }
    }

    /// A merged push is claimed by one instance only, is not claimed again while claimed,
    /// and once done opens the next window with no trailing push left.
    @Test func aDueTrailingPushIsClaimedOnceAndOpensTheNextWindow() async throws {
        let settings = try await prepared()
        // Long enough that the second write lands inside the first one's window on a machine
        // at load 41 (a 5 s window had ended between them there, so it opened a new one).
        let window = SyncWindow(length: .seconds(20))
        let (opening, latest) = (UUID(), UUID())
        try await TestPostgres.withStore(settings) { a in
            try await TestPostgres.withStore(settings) { b in
                #expect(try await Self.decideAndWrite(a, window: window, job: opening).written.count == 6)
                let merged = try await Self.decideAndWrite(b, window: window, job: latest)
                #expect(merged.written.count == 6)
                #expect(merged.actions.allSatisfy { if case .merge = $0 { true } else { false } })
                var claimed: [DueTrailingPush] = []
                try await waitUntil("the window ended and its pushes are claimed", timeout: .seconds(120)) {
                    async let fromA = a.claimDueTrailingPushes(limit: 4, leaseMS: 60_000)
                    async let fromB = b.claimDueTrailingPushes(limit: 4, leaseMS: 60_000)
                    let (x, y) = try await (fromA, fromB)
                    claimed += x.pushes + y.pushes
                    return claimed.count >= 6
                }
                #expect(claimed.count == 6)
                #expect(Set(claimed.map(\.device.position)).count == 6, "no push claimed twice")
                #expect(claimed.allSatisfy { $0.window.trailing == latest && $0.active && $0.body == Array("{}".utf8) })
                #expect(try await a.claimDueTrailingPushes(limit: 10, leaseMS: 60_000).pushes.isEmpty, "claimed pushes wait for their lease")
                let now = try await a.currentTimeMS()
                let done = try await a.storeWindows(
                    claimed.map { SyncWindowWrite(position: $0.device.position, window: window.afterTrailingPush($0.window, now: now), trailingBody: nil) })
                #expect(done.count == 6)
                let after = try await a.activeDevicesWithWindows(group: "g", after: nil, limit: 100)
                #expect(after.devices.allSatisfy { $0.window.trailing == nil && $0.window.openedBy == latest && $0.window.windowEnd == now + 20_000 })
                try await Task.sleep(for: .milliseconds(20_100))
                #expect(try await a.claimDueTrailingPushes(limit: 10, leaseMS: 60_000).pushes.isEmpty, "nothing left to send")
            }
        }
    }

    /// A claim whose instance died runs out: the push is claimed again.
    @Test func aClaimRunsOut() async throws {
        let settings = try await prepared()
        // The second write must land in the first one's window on a loaded machine (load 31
        // put more than 5 s between them).
        let window = SyncWindow(length: .seconds(20))
        try await TestPostgres.withStore(settings) { store in
            _ = try await Self.decideAndWrite(store, window: window, job: UUID())
            _ = try await Self.decideAndWrite(store, window: window, job: UUID())
            var first: [DueTrailingPush] = []
            try await waitUntil("due", timeout: .seconds(120)) {
                first += try await store.claimDueTrailingPushes(limit: 10, leaseMS: 200).pushes
                return first.count == 6
            }
            var second: [DueTrailingPush] = []
            try await waitUntil("claimed again after the lease", timeout: .seconds(60)) {
                second += try await store.claimDueTrailingPushes(limit: 10, leaseMS: 60_000).pushes
                return second.count == 6
            }
            #expect(Set(second.map(\.device.position)) == Set(first.map(\.device.position)))
        }
    }
}
