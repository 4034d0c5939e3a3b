/// An example sync server on APNSWorkerClient: it publishes a background push for a changed
/// account (an `Encodable` payload and `userInfo`, asking for delivery events), then reads
/// `apns.feedback` and prunes what Apple reported, acking each event only once it is handled,
/// and reads the delivery events of its jobs: a dead one is logged with its reason and its job
/// is never published again as it was. It exits 0 once it has seen feedback for every token in
/// `APNS_EXAMPLE_EXPECT_FEEDBACK` (comma-separated; none: once its jobs are confirmed) and, with
/// `APNS_EXAMPLE_EXPECT_EVENTS=1`, an end for every job it published; 1 when the deadline
/// (`APNS_EXAMPLE_DEADLINE_SECONDS`, default 60) passes first or anything fails.
///
///     APNS_EXAMPLE_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f \
///     APNS_EXAMPLE_BUNDLE=com.example.app APNS_EXAMPLE_TOKENS=<hex>,<hex> swift run
import APNSWorkerClient
import Foundation
import Logging

struct AccountChanged: Encodable {
    struct APS: Encodable {
        var contentAvailable = 1
        enum CodingKeys: String, CodingKey { case contentAvailable = "content-available" }
    }
    var aps = APS()
    var account: String
}

struct Audit: Encodable {
    var syncServer: String
    var change: Int
}

func fail(_ line: String) -> Never {
    FileHandle.standardError.write(Data("sync-server-example: \(line)\n".utf8))
    exit(1)
}

let environment = ProcessInfo.processInfo.environment
guard let url = environment["APNS_EXAMPLE_AMQP_URL"] else { fail("set APNS_EXAMPLE_AMQP_URL") }
let bundle = environment["APNS_EXAMPLE_BUNDLE"] ?? "com.example.app"
let tokens = (environment["APNS_EXAMPLE_TOKENS"] ?? "").split(separator: ",").map(String.init)
let expected = Set((environment["APNS_EXAMPLE_EXPECT_FEEDBACK"] ?? "").split(separator: ",").map { $0.lowercased() })
let deadline = Duration.seconds(Int(environment["APNS_EXAMPLE_DEADLINE_SECONDS"] ?? "") ?? 60)
let queue = environment["APNS_EXAMPLE_FEEDBACK_QUEUE"] ?? "sync-example.feedback"
let expectEvents = environment["APNS_EXAMPLE_EXPECT_EVENTS"] == "1"

var logger = Logger(label: "sync-server-example")
logger.logLevel = .info

let watchdog = Task {
    try await Task.sleep(for: deadline)
    fail("deadline of \(deadline) passed; feedback still expected for \(expected.count) token(s)")
}

do {
    let client = try await APNSWorkerClient.connect(url: url, logger: logger, publishDeadline: .seconds(20))
    // Read feedback before publishing, so no event of this run is missed.
    let feedback = try await client.feedback(queue: queue, bundleIDs: [bundle])
    // The ends of this run's jobs, on a queue of this connection's own (a real sync server names
    // a durable one, so that events published while it is down wait for it).
    let events = try await client.events(bundleIDs: [bundle], ends: [.delivered, .invalidToken, .dead], dropRepeats: true)
    var published: Set<String> = []
    for token in tokens {
        let job = NotificationJob(
            bundleID: bundle, token: token, payload: try APNSPayload(AccountChanged(account: "42")),
            options: DeliveryOptions(userInfo: try UserInfo(Audit(syncServer: "example", change: 1)), events: .ends))
        do {
            try await client.publish(job)
            published.insert(job.id.uuidString.lowercased())
            print("published \(job.id) (confirmed)")
        } catch {
            switch error {
            case .invalidMessage(let why), .payloadTooLarge(let why): fail("refused before publishing: \(why)")
            case .connectionUnavailable, .notConfirmed: fail("not published, try later: \(error)")
            case .encodingFailed, .closed, .broker: fail("\(error)")
            }
        }
    }
    var waiting = expected
    if !waiting.isEmpty {
        for try await delivery in feedback {
            let event = delivery.event
            switch event.target {
            case .token(let token):
                print("feedback: \(event.reason) for a token of \(event.bundleID): prune it")
                waiting.remove(token)
            case .channel(let channel):
                print("feedback: \(event.reason) for channel \(channel) of \(event.bundleID)")
            }
            // Handled (pruned): now the broker may forget it.
            delivery.ack()
            if waiting.isEmpty { break }
        }
    }
    await feedback.cancel()
    // Jobs never to publish again as they were: the worker called them dead.
    var neverAgain: Set<String> = []
    var unfinished = expectEvents ? published : []
    if !unfinished.isEmpty {
        for try await delivery in events {
            let event = delivery.event
            switch event.end {
            case .dead:
                // The job will not be delivered as it is (malformed, too large, refused by Apple,
                // out of attempts): say why, and do not send the same job again.
                logger.error("push dead", metadata: ["job": "\(event.jobID)", "reason": "\(event.reason ?? "-")", "status": "\(event.status)"])
                neverAgain.insert(event.jobID.lowercased())
            case .delivered, .invalidToken, .retried:
                print("event: job \(event.jobID) \(event.end.rawValue) after \(event.attempts) attempt(s)")
            }
            delivery.ack()
            if event.end != .retried { unfinished.remove(event.jobID.lowercased()) }
            if unfinished.isEmpty { break }
        }
    }
    await events.cancel()
    if !neverAgain.isEmpty { print("dead, not to be published again: \(neverAgain.sorted().joined(separator: ", "))") }
    await client.close()
    watchdog.cancel()
    print("sync-server-example: done")
} catch {
    fail("\(error)")
}
