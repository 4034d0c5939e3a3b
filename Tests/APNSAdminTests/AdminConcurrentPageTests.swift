import AMQPClient
import APNSAdmin
import APNSOperations
import APNSTopologyNames
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import TestSupport

/// The admin page under requests at once, on the real broker. RabbitMQ has no peek: a listing
/// holds the messages it reads until its session closes. Four page requests at once over 60
/// dead jobs of 2 MiB each showed "No dead jobs." (alone, the page lists all 60): their
/// listings split the messages between them, each waiting for the rest. The inspector's
/// listings take turns, and a listing that could not be read says so.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable, "needs the test broker (scripts/test)"))
struct AdminConcurrentPageTests {
    static let bearer: HTTPFields = [.authorization: "Bearer \(AdminHarness.token)"]

    @Test func fourPagesAtOnceEachListEveryDeadJob() async throws {
        try await AdminHarness.with { harness in
            let dead = TopologyNames.deadQueue(harness.bundle)
            let count = 60
            for index in 0..<count {
                var body = Array(#"{"id":"big-\#(index)","pad":""#.utf8)
                body += [UInt8](repeating: 0x78, count: (2 << 20) - body.count - 2) + Array(#""}"#.utf8)
                try await harness.publisher.publishAgainAfterNacks(
                    AMQPOutboundMessage(exchange: "", routingKey: dead, body: body, properties: .persistentJSON))
            }
            try await harness.admin.makeApplication().test(.router) { client in
                let pages = try await withThrowingTaskGroup(of: String.self) { group in
                    for _ in 0..<4 {
                        group.addTask {
                            String(buffer: try await client.execute(uri: "/?bundle=\(harness.bundle)", method: .get, headers: Self.bearer).body)
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                for page in pages {
                    let rows = page.components(separatedBy: "<tr class=\"dead-job\"").count - 1
                    #expect(rows == count, "a page listed \(rows) of \(count) dead jobs")
                    #expect(!page.contains("No dead jobs."))
                }
            }
            #expect(try await harness.queues.readyCount(.dead, bundleID: harness.bundle) == count)
            _ = try await harness.queues.purge(.dead, .all(JobFilter(bundleID: harness.bundle)))
        }
    }
}
