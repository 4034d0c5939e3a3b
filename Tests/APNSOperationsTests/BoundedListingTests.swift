// A listing of a big dead queue reads the page, not the queue. Measured in messages
// and bytes read from the broker (what a listing holds in the worker), never in time.
import AMQPClient
import APNSOperations
import APNSTopologyNames
import Foundation
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable), .serialized)
struct BoundedListingTests {
    static let jobCount = 50_000
    /// Each job's body: about 2 KiB, so the whole queue is about 100 MiB.
    static let padding = String(repeating: "x", count: 1900)

    static func bigDeadJob(_ index: Int, to queue: String) -> AMQPOutboundMessage {
        var message = deadJob(id: String(format: "big-%05d", index), to: queue, reason: "BadDeviceToken", failedAt: Date())
        message.body = Array(#"{"id":"big-\#(index)","token":"\#(testToken)","payload":{"aps":{"alert":"\#(padding)"}}}"#.utf8)
        return message
    }

    /// Resident set size of this process (Linux), in bytes.
    static func residentBytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { return 0 }
        return kilobytes * 1024
    }

    @Test func aPageOfA50000JobDeadQueueReadsThePageOnly() async throws {
        let bundle = try await TestBundle.make(.quorum)
        // Bodies differ by the digits of their id: bound by the shortest and the longest.
        let bodySize = Self.bigDeadJob(Self.jobCount - 1, to: bundle.dead).body.count
        let smallest = Self.bigDeadJob(0, to: bundle.dead).body.count
        try await bundle.withConnection { connection in
            try await withThrowingTaskGroup(of: Void.self) { group in
                var inFlight = 0
                for index in 0..<Self.jobCount {
                    if inFlight >= 512 {
                        try await group.next()
                        inFlight -= 1
                    }
                    let message = Self.bigDeadJob(index, to: bundle.dead)
                    group.addTask { try await connection.publish(message) }
                    inFlight += 1
                }
                try await group.waitForAll()
            }
        }
        #expect(try await bundle.depth(bundle.dead) == Self.jobCount)
        let inspector = try bundle.inspector()
        let scope = JobFilter(bundleID: bundle.bundleID)

        let before = Self.residentBytes()
        let first = try await inspector.list([ListingRequest(kind: .dead, filter: scope, limit: 100, scanLimit: 10_000)])[0]
        let after = Self.residentBytes()
        #expect(first.jobs.count == 100 && first.more && !first.scanLimited)
        // The jobs went out 512 at a time from concurrent tasks, so the queue's order is only
        // roughly the ids' (CI once had another job than big-99 at the 100th place).
        let firstIDs = first.jobs.compactMap(\.jobID)
        #expect(Set(firstIDs).count == 100 && firstIDs.allSatisfy { $0.hasPrefix("big-") })
        // The page and one more message to know a next page exists: not 50,000 (~100 MiB).
        #expect(first.scanned == 101)
        #expect((101 * smallest...101 * bodySize).contains(first.scannedBytes))
        print("[measure] a 100-job page of a \(Self.jobCount)-job dead queue (\(Self.jobCount * bodySize / 1_048_576) MiB): read \(first.scanned) messages, \(first.scannedBytes) bytes; RSS \(before / 1_048_576) -> \(after / 1_048_576) MiB")

        let later = try await inspector.list([ListingRequest(kind: .dead, filter: scope, offset: 2_000, limit: 100, scanLimit: 10_000)])[0]
        #expect(later.jobs.count == 100 && later.scanned == 2_101)
        #expect(Set(later.jobs.compactMap(\.jobID)).isDisjoint(with: firstIDs), "the page at offset 2,000 is other jobs")

        // A filter that matches nothing looks no further than the scan limit, and says so.
        var nothing = scope
        nothing.reason = "NoSuchReason"
        let filtered = try await inspector.list([ListingRequest(kind: .dead, filter: nothing, limit: 100, scanLimit: 10_000)])[0]
        #expect(filtered.jobs.isEmpty && filtered.scanned == 10_000 && filtered.scanLimited)
        #expect((10_000 * smallest...10_000 * bodySize).contains(filtered.scannedBytes))

        // Nothing was consumed; the count of a confirmation step comes from the depth.
        #expect(try await inspector.readyCount(.dead, bundleID: bundle.bundleID) == Self.jobCount)
        _ = try await inspector.purge(.dead, .all(scope))
        #expect(try await bundle.depth(bundle.dead) == 0)
    }

    /// On the real broker: dead jobs of several MiB are read cut to 64 KiB as
    /// they arrive (the bytes a listing holds), not whole; `show` still reads one whole.
    @Test func aListingOfMultiMiBDeadJobsHolds64KiBOfEach() async throws {
        let bundle = try await TestBundle.make(.quorum)
        let count = 12
        let sizes = (0..<count).map { (1 + $0 % 4) << 20 }
        try await bundle.withConnection { connection in
            for (index, size) in sizes.enumerated() {
                var message = deadJob(id: "huge-\(index)", to: bundle.dead, reason: "BadDeviceToken", failedAt: Date())
                message.body = Array(#"{"id":"huge-\#(index)","token":"\#(testToken)","pad":""#.utf8)
                message.body += [UInt8](repeating: 0x78, count: size - message.body.count - 2) + Array(#""}"#.utf8)
                try await connection.publish(message)
            }
        }
        let inspector = try bundle.inspector()
        let scope = JobFilter(bundleID: bundle.bundleID)
        let listing = try await inspector.list([ListingRequest(kind: .dead, filter: scope, limit: 500)])[0]
        #expect(listing.jobs.map(\.jobID) == (0..<count).map { "huge-\($0)" })
        #expect(listing.jobs.map(\.bodySize) == sizes)
        #expect(listing.jobs.allSatisfy { $0.body.utf8.count == QueueInspector.listedBodyBytes })
        #expect(listing.scannedBytes == count * QueueInspector.listedBodyBytes, "read \(listing.scannedBytes) bytes")
        let shown = try #require(try await inspector.show(.dead, jobID: "huge-3", bundleID: bundle.bundleID))
        #expect(shown.body.utf8.count == sizes[3] && shown.bodySize == nil)
        #expect(try await bundle.depth(bundle.dead) == count)
        _ = try await inspector.purge(.dead, .all(scope))
    }
}

