/// An example sync server on APNSWorkerClient: it publishes a background push for a changed
/// account (an `Encodable` payload and `userInfo`, asking for delivery events), then reads
/// `apns.feedback` and prunes what Apple reported, acking each event only once it is handled,
/// and reads the delivery events of its jobs: a dead one is logged with its reason and its job
/// is never published again as it was. What it cannot publish (the broker is down or did not
/// confirm) stays in its outbox and is published again, in order, when the broker is back.
/// It makes `APNS_EXAMPLE_CHANGES` changes (default 1, one every `APNS_EXAMPLE_CHANGE_INTERVAL_MS`),
/// a job per token each, and exits 0 once every job is confirmed, it has seen feedback for every
/// token in `APNS_EXAMPLE_EXPECT_FEEDBACK` (comma-separated) and, with
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

/// What this sync server could not publish yet, oldest first. A job goes in at the back and only
/// the front is published, so jobs reach the worker in the order of their changes, a broker
/// outage or not. A real sync server keeps its outbox in its database, written in the
/// transaction of the change, so that its own restart loses nothing either; this one keeps it in
/// memory.
struct Outbox {
    private(set) var jobs: [NotificationJob] = []

    mutating func add(_ job: NotificationJob) { jobs.append(job) }

    /// Publishes from the front until the outbox is empty or the broker is unavailable (what is
    /// left waits for the next call); returns the jobs the broker confirmed.
    mutating func publish(through client: APNSWorkerClient) async -> [NotificationJob] {
        var confirmed: [NotificationJob] = []
        while let job = jobs.first {
            do {
                try await client.publish(job)
            } catch {
                switch error {
                case .connectionUnavailable, .notConfirmed:
                    // Try later: nothing is lost, and nothing behind it goes first.
                    print("outbox: kept \(jobs.count) job(s) until the broker is back: \(error)")
                    return confirmed
                case .invalidMessage(let why), .payloadTooLarge(let why): fail("refused before publishing: \(why)")
                case .encodingFailed, .closed, .broker: fail("\(error)")
                }
            }
            jobs.removeFirst()
            confirmed.append(job)
            print("published \(job.id) (confirmed)")
        }
        return confirmed
    }
}

let environment = ProcessInfo.processInfo.environment
guard let url = environment["APNS_EXAMPLE_AMQP_URL"] else { fail("set APNS_EXAMPLE_AMQP_URL") }
let bundle = environment["APNS_EXAMPLE_BUNDLE"] ?? "com.example.app"
let tokens = (environment["APNS_EXAMPLE_TOKENS"] ?? "").split(separator: ",").map(String.init)
let expected = Set((environment["APNS_EXAMPLE_EXPECT_FEEDBACK"] ?? "").split(separator: ",").map { $0.lowercased() })
let deadline = Duration.seconds(Int(environment["APNS_EXAMPLE_DEADLINE_SECONDS"] ?? "") ?? 60)
let queue = environment["APNS_EXAMPLE_FEEDBACK_QUEUE"] ?? "sync-example.feedback"
let expectEvents = environment["APNS_EXAMPLE_EXPECT_EVENTS"] == "1"
let changes = max(1, Int(environment["APNS_EXAMPLE_CHANGES"] ?? "") ?? 1)
let changeInterval = Duration.milliseconds(Int(environment["APNS_EXAMPLE_CHANGE_INTERVAL_MS"] ?? "") ?? 0)
let publishDeadline = Duration.seconds(Int(environment["APNS_EXAMPLE_PUBLISH_DEADLINE_SECONDS"] ?? "") ?? 20)

var logger = Logger(label: "sync-server-example")
logger.logLevel = .info

let watchdog = Task {
    try await Task.sleep(for: deadline)
    fail("deadline of \(deadline) passed; feedback still expected for \(expected.count) token(s)")
}

do {
    let client = try await APNSWorkerClient.connect(url: url, logger: logger, publishDeadline: publishDeadline)
    // Read feedback before publishing, so no event of this run is missed.
    let feedback = expected.isEmpty ? nil : try await client.feedback(queue: queue, bundleIDs: [bundle])
    // The ends of this run's jobs, on a queue of this connection's own (a real sync server names
    // a durable one, so that events published while it is down wait for it).
    let events = expectEvents ? try await client.events(bundleIDs: [bundle], ends: [.delivered, .invalidToken, .dead], dropRepeats: true) : nil
    var outbox = Outbox()
    var published: Set<String> = []
    for change in 1...changes {
        for token in tokens {
            outbox.add(NotificationJob(
                bundleID: bundle, token: token, payload: try APNSPayload(AccountChanged(account: "42")),
                options: DeliveryOptions(userInfo: try UserInfo(Audit(syncServer: "example", change: change)), events: .ends)))
        }
        for job in await outbox.publish(through: client) { published.insert(job.id.uuidString.lowercased()) }
        try await Task.sleep(for: changeInterval)
    }
    while !outbox.jobs.isEmpty {
        try await Task.sleep(for: .seconds(1))
        for job in await outbox.publish(through: client) { published.insert(job.id.uuidString.lowercased()) }
    }
    var waiting = expected
    if let feedback {
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
        await feedback.cancel()
    }
    // Jobs never to publish again as they were: the worker called them dead.
    var neverAgain: Set<String> = []
    var unfinished = published
    if let events {
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
        await events.cancel()
    }
    if !neverAgain.isEmpty { print("dead, not to be published again: \(neverAgain.sorted().joined(separator: ", "))") }
    await client.close()
    watchdog.cancel()
    print("sync-server-example: done")
} catch {
    fail("\(error)")
}
