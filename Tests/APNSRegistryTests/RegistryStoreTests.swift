import AMQPClient
import APNSConfig
import APNSModel
import APNSRegistryMessages
import Foundation
import Logging
import PostgresNIO
import Testing
import TestSupport

@testable import APNSRegistry

/// `RegistryStore` against the real PostgreSQL of `scripts/test`, a fresh database per test.
@Suite(.enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct RegistryStoreTests {
    @Test func migrationsFromEmptyAndRerun() async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            let before = try await store.schemaVersion()
            let first = try await store.migrate()
            let again = try await store.migrate()
            let after = try await store.schemaVersion()
            #expect(before == 0)
            #expect(first == [1, 2])
            #expect(again == [])
            #expect(after == RegistrySchema.latestVersion)
        }
    }

    @Test func instancesMigratingAtOnceApplyEachVersionOnce() async throws {
        let settings = try await TestPostgres.freshDatabase()
        let applied = try await withThrowingTaskGroup(of: [Int].self) { group in
            for _ in 0..<4 {
                group.addTask { try await TestPostgres.storeValue(settings) { try await $0.migrate() } }
            }
            return try await group.reduce(into: [Int]()) { $0 += $1 }
        }
        #expect(applied == [1, 2])
    }

    /// Out-of-order register/unregister messages, applied by two competing appliers in
    /// different orders, end in the state of each device's newest message.
    @Test func lastWriterWinsWhateverTheOrder() async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            var messages: [RegistrationMessage] = []
            var newest: [String: RegistrationMessage] = [:]
            var generator = SystemRandomNumberGenerator()
            for device in 0..<60 {
                let token = String(format: "%04x", device)
                var history: [RegistrationMessage] = []
                for step in 0..<6 {
                    let at = Int64(1_000 + step * 10)
                    if Bool.random(using: &generator) {
                        history.append(RegistrationMessage(op: .register, bundleID: "com.a", token: token, group: "g\(step)", at: at))
                    } else {
                        history.append(RegistrationMessage(op: .unregister, bundleID: "com.a", token: token, group: nil, at: at))
                    }
                }
                newest[token] = history.last
                messages += history
            }
            messages.shuffle()
            // Two competing consumers, each taking every other message; then everything redelivered.
            let halves = [messages.enumerated().filter { $0.offset % 2 == 0 }.map(\.element), messages.enumerated().filter { $0.offset % 2 == 1 }.map(\.element)]
            try await withThrowingTaskGroup(of: Void.self) { group in
                for half in halves {
                    group.addTask { for message in half { try await store.apply(message) } }
                }
                try await group.waitForAll()
            }
            for message in messages.shuffled() {
                #expect(try await store.apply(message) == false, "a redelivered message changed a device")
            }
            for (token, last) in newest {
                let device = try #require(try await store.device(bundleID: "com.a", token: token))
                #expect(device.changedAt == last.at)
                if last.op == .register {
                    #expect(device.state == .active)
                    #expect(device.group == last.group)
                } else {
                    #expect(device.state == .unregistered)
                }
            }
        }
    }

    @Test func unregisterLeavesATombstoneAndWinsATie() async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            try await store.apply(.init(op: .unregister, bundleID: "com.a", token: "aa", group: nil, at: 50))
            #expect(try await store.apply(.init(op: .register, bundleID: "com.a", token: "aa", group: "g", at: 40)) == false)
            #expect(try await store.apply(.init(op: .register, bundleID: "com.a", token: "aa", group: "g", at: 50)) == false)
            #expect(try await store.device(bundleID: "com.a", token: "AA")?.state == .unregistered)
            #expect(try await store.activeDevices(group: "g", after: nil, limit: 10).isEmpty)
            #expect(try await store.apply(.init(op: .register, bundleID: "com.a", token: "aa", group: "g", at: 51)))
            #expect(try await store.activeDevices(group: "g", after: nil, limit: 10).map(\.token) == ["aa"])
        }
    }

    /// A registration with `at` = Int64.max, once stored, made every later change to
    /// the device lose (last writer wins by `at`). It is malformed now, dead-lettered unapplied,
    /// and the device's next real change applies.
    @Test func aRegistrationFromTheFarFutureIsDeadAndDoesNotFreezeTheDevice() async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            let handler = RegistrationHandler(store: store, logger: TestPostgres.logger)
            let broker = InMemoryBroker()
            try await broker.declareQueue(QueueDeclaration(name: "registry.frozen"))
            func handle(group: String, at: Int64) async throws -> RegistryRoute {
                let body = #"{"op":"register","bundleId":"com.a","token":"aa","group":"\#(group)","at":\#(at)}"#
                broker.enqueue("registry.frozen", body: Array(body.utf8))
                return await handler.handle(try #require(try await broker.get(queue: "registry.frozen")))
            }
            let now = RegistrationMessage.currentMilliseconds()
            guard case .ack = try await handle(group: "first", at: now) else { throw TestSupportError("the first registration failed") }
            guard case .dead(let error) = try await handle(group: "forged", at: Int64.max) else {
                Issue.record("a registration at Int64.max was not dead-lettered")
                return
            }
            #expect(error.kind == .malformedJob && error.field == "at")
            #expect(try await store.device(bundleID: "com.a", token: "aa")?.group == "first")
            guard case .ack = try await handle(group: "second", at: now + 1) else { throw TestSupportError("the later registration failed") }
            #expect(try await store.device(bundleID: "com.a", token: "aa")?.group == "second", "the device still takes changes")
        }
    }

    /// One mark with a value PostgreSQL refuses (a NUL in Apple's reason) used to fail
    /// the whole batch at every flush, so no device was marked again. Now it alone is dropped
    /// (and logged), the others are applied, and nothing is left pending.
    @Test func aMarkPostgreSQLRefusesDoesNotHoldBackTheOthers() async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            for token in ["01", "02", "03"] {
                try await store.apply(.init(op: .register, bundleID: "com.a", token: token, group: "g", at: 1_000))
            }
            let recorder = RegistryRecorder(store: store, flushInterval: .seconds(3600), logger: TestPostgres.logger)
            recorder.tokenInvalid(bundleID: "com.a", token: try #require(DeviceToken(hex: "01")), reason: "Unregistered", timestamp: 2_000)
            recorder.tokenInvalid(bundleID: "com.a", token: try #require(DeviceToken(hex: "02")), reason: "Bad\u{0}Reason", timestamp: 2_000)
            recorder.tokenInvalid(bundleID: "com.a", token: try #require(DeviceToken(hex: "03")), reason: "BadDeviceToken", timestamp: 2_000)
            #expect(await recorder.flush())
            #expect(recorder.pending.marks == 0, "the refused mark is not retried for ever")
            #expect(try await store.device(bundleID: "com.a", token: "01")?.invalidReason == "Unregistered")
            #expect(try await store.device(bundleID: "com.a", token: "02")?.state == .active)
            #expect(try await store.device(bundleID: "com.a", token: "03")?.invalidReason == "BadDeviceToken")
        }
    }

    @Test func invalidMarksHonourLaterRegistrations() async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            try await store.apply(.init(op: .register, bundleID: "com.a", token: "01", group: "g", at: 1_000))
            try await store.apply(.init(op: .register, bundleID: "com.a", token: "02", group: "g", at: 5_000))
            try await store.markInvalid([
                InvalidMark(bundleID: "com.a", token: "01", reason: "Unregistered", at: 2_000),
                // Registered again after Apple's timestamp: not marked.
                InvalidMark(bundleID: "com.a", token: "02", reason: "Unregistered", at: 4_000),
                // Unknown device: nothing to mark.
                InvalidMark(bundleID: "com.a", token: "03", reason: "BadDeviceToken", at: 4_000),
            ])
            let marked = try #require(try await store.device(bundleID: "com.a", token: "01"))
            #expect(marked.state == .invalid)
            #expect(marked.invalidReason == "Unregistered")
            #expect(marked.invalidAt == 2_000)
            #expect(try await store.device(bundleID: "com.a", token: "02")?.state == .active)
            #expect(try await store.activeDevices(group: "g", after: nil, limit: 10).map(\.token) == ["02"])
            // A register older than Apple's timestamp does not clear the mark; a newer one does.
            try await store.apply(.init(op: .register, bundleID: "com.a", token: "01", group: "g", at: 1_500))
            #expect(try await store.device(bundleID: "com.a", token: "01")?.state == .invalid)
            try await store.apply(.init(op: .register, bundleID: "com.a", token: "01", group: "g", at: 2_500))
            #expect(try await store.device(bundleID: "com.a", token: "01")?.state == .active)
            let counts = try await store.deviceCounts().bundles
            #expect(counts == [BundleDeviceCount(bundleId: "com.a", active: 2, invalid: 0)])
        }
    }

    @Test func activeDevicesPageThroughALargeGroupOnce() async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for chunk in stride(from: 0, to: 1_200, by: 100) {
                    group.addTask {
                        for n in chunk..<(chunk + 100) {
                            try await store.apply(.init(op: .register, bundleID: n % 2 == 0 ? "com.a" : "com.b", token: String(format: "%06x", n), group: "big", at: 1))
                        }
                    }
                }
                try await group.waitForAll()
            }
            var seen: [String] = []
            var after: DevicePosition? = nil
            while true {
                let page = try await store.activeDevices(group: "big", after: after, limit: 500)
                seen += page.map { "\($0.bundleID)/\($0.token)" }
                after = page.last?.position
                if page.count < 500 { break }
            }
            #expect(seen.count == 1_200)
            #expect(Set(seen).count == 1_200)
            #expect(seen == seen.sorted())
        }
    }

    @Test func countsAddUpAcrossWriters() async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            var first = CountAggregator()
            first.add(bundleID: "com.a", end: .delivered, epochSeconds: 7_205, count: 3)
            first.add(bundleID: "com.a", end: .dead, epochSeconds: 7_205)
            var second = CountAggregator()
            second.add(bundleID: "com.a", end: .delivered, epochSeconds: 7_999, count: 4)
            second.add(bundleID: "com.b", end: .fannedOut, epochSeconds: 10_800, count: 2)
            try await store.addCounts(first.take())
            try await store.addCounts(second.take())
            let rows = try await store.counts(sinceEpochSeconds: 0)
            #expect(rows.contains(CountRow(bundleId: "com.a", hour: 7_200, end: "delivered", count: 7)))
            #expect(rows.contains(CountRow(bundleId: "com.a", hour: 7_200, end: "dead", count: 1)))
            #expect(rows.contains(CountRow(bundleId: "com.b", hour: 10_800, end: "fannedOut", count: 2)))
            #expect(rows.count == 3)
        }
    }

    /// Anyone allowed to publish on `apns.registry` can register one device in
    /// each of as many bundle IDs as they like (and a group job counts an end under each). The
    /// admin's summaries read the busiest bundle IDs only, with totals for the rest, in SQL.
    @Test func deviceCountsAndCountsHoldTheBusiestBundlesAndTotalTheRest() async throws {
        let settings = try await TestPostgres.freshDatabase()
        try await TestPostgres.withStore(settings) { store in
            try await store.migrate()
            let forged = 3_000
            try await store.client.query(
                """
                INSERT INTO apns_devices (bundle_id, token, group_name, environment, registered, changed_at, registered_at)
                SELECT 'com.forged.' || n, 'ab', 'g', 'production', true, 1, 1 FROM generate_series(1, \(forged)) AS n
                """, logger: Logger(label: "test"))
            try await store.importDevices(bundleID: "com.real", tokens: ["01", "02", "03"], group: "g", at: 1)
            try await store.markInvalid([InvalidMark(bundleID: "com.real", token: "03", reason: "Unregistered", at: 2)])

            let devices = try await store.deviceCounts(limit: 10)
            #expect(devices.bundles.count == 10)
            #expect(devices.bundles.first == BundleDeviceCount(bundleId: "com.real", active: 2, invalid: 1))
            #expect(devices.bundlesNotShown == Int64(forged + 1 - 10))
            #expect(devices.activeNotShown == Int64(forged - 9))
            #expect(devices.invalidNotShown == 0)
            let byDefault = try await store.deviceCounts()
            #expect(byDefault.bundles.count == RegistryStore.deviceCountBundleLimit)
            #expect(byDefault.bundlesNotShown == Int64(forged + 1 - RegistryStore.deviceCountBundleLimit))

            var aggregator = CountAggregator()
            for n in 1...forged { aggregator.add(bundleID: "com.forged.\(n)", end: .fannedOut, epochSeconds: 7_200) }
            aggregator.add(bundleID: "com.real", end: .delivered, epochSeconds: 7_200, count: 40)
            aggregator.add(bundleID: "com.real", end: .dead, epochSeconds: 10_800, count: 2)
            try await store.addCounts(aggregator.take())
            let counts = try await store.countSummary(sinceEpochSeconds: 0, bundleLimit: 5)
            #expect(Set(counts.rows.map(\.bundleId)).count == 5)
            #expect(counts.rows.count == 6)
            #expect(counts.rows.contains(CountRow(bundleId: "com.real", hour: 7_200, end: "delivered", count: 40)))
            #expect(counts.rows.contains(CountRow(bundleId: "com.real", hour: 10_800, end: "dead", count: 2)))
            #expect(counts.bundles == Int64(forged + 1))
            #expect(counts.bundlesNotShown == Int64(forged + 1 - 5))
            #expect(counts.countNotShown == Int64(forged - 4))
            #expect(Set(try await store.counts(sinceEpochSeconds: 0).map(\.bundleId)).count == RegistryStore.countedBundleLimit)
            // Only the hours asked for count, and nothing is left out when everything fits.
            let later = try await store.countSummary(sinceEpochSeconds: 10_800)
            #expect(later == CountSummary(rows: [CountRow(bundleId: "com.real", hour: 10_800, end: "dead", count: 2)], bundles: 1))
        }
    }

}

extension RegistryStore {
    /// The schema version in the database (0 before any migration).
    func schemaVersion() async throws -> Int {
        try await bounded { [client, logger] in
            let exists = try await client.query("SELECT to_regclass('apns_schema_migrations') IS NOT NULL", logger: logger)
            for try await present in exists.decode(Bool.self) where !present { return 0 }
            let rows = try await client.query(
                "SELECT coalesce((SELECT max(version) FROM apns_schema_migrations), 0)::integer", logger: logger)
            for try await version in rows.decode(Int32.self) { return Int(version) }
            return 0
        }
    }
}
