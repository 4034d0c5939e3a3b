// Connection loss and recovery: heartbeats, a connection closed by the broker, and a broker
// whose application is stopped and started again (on a private node).
import AMQPClient
import APNSModel
import APNSTopology
import APNSTopologyNames
import Foundation
import Synchronization
import Testing
import TestSupport

@Suite(.enabled(if: TestBroker.isAvailable))
struct RecoveryTests {
    @Test func heartbeatsKeepAnIdleConnectionAlive() async throws {
        let broker = try TestBroker.require()
        let name = uniqueName("heartbeat")
        try await withConnection(configuration(broker, name: name, heartbeat: .seconds(5))) { connection in
            // The management API lists a new connection after its next stats tick.
            try await eventually(.seconds(15), "connection listed with its heartbeat") {
                let listed = await (try? broker.array("/connections"))?.first { ($0["client_properties"] as? [String: Any])?["connection_name"] as? String == name }
                return (listed?["timeout"] as? Int) == 5
            }
            // Idle for more than two heartbeat intervals: without heartbeats the broker would
            // close the connection after ~10 s. (5 s rather than less: a loaded machine can delay
            // the broker's or our heartbeat thread by seconds, and two missed beats end it.)
            try await Task.sleep(for: .seconds(12))
            #expect(connection.state == .connected)
            #expect(connection.connectionCount == 1, "no reconnect happened")
            let queue = uniqueName("heartbeat")
            try await connection.declareQueue(classicQueue(queue))
            try await connection.publish(message("alive", to: queue))
            try await connection.deleteQueue(queue)
        }
    }

    /// A broker that stops answering with its socket still open (its process frozen, as a
    /// hung host or a partition looks from here) is noticed by the heartbeats alone: after two
    /// missed intervals librabbitmq gives up the socket, the connection says it is lost, and it
    /// connects again once the broker answers. Without heartbeats nothing would ever say so.
    @Test func missedHeartbeatsEndAFrozenBrokersConnectionAndItReconnects() async throws {
        try await withPrivateBroker { broker in
            let pidText = try String(contentsOfFile: broker.directory + "/rabbitmq.pid", encoding: .utf8)
            let pid = try #require(pid_t(pidText.trimmingCharacters(in: .whitespacesAndNewlines)))
            try await withConnection(configuration(broker.coordinates, heartbeat: .seconds(2))) { connection in
                #expect(connection.state == .connected)
                #expect(kill(pid, SIGSTOP) == 0)
                var frozen = true
                defer { if frozen { kill(pid, SIGCONT) } }
                // Two missed 2 s intervals; the deadline is long for a loaded machine, and a
                // connection that never noticed would wait it out and fail here.
                try await eventually(.seconds(60), "the frozen broker noticed") { connection.state != .connected }
                kill(pid, SIGCONT)
                frozen = false
                try await eventually(.seconds(120), "connected again") { connection.state == .connected && connection.connectionCount >= 2 }
                let queue = uniqueName("heartbeat")
                try await connection.declareQueue(classicQueue(queue))
                try await connection.publish(message("after the freeze", to: queue))
                try await connection.deleteQueue(queue)
            }
        }
    }

    @Test func staleDeliveryTagsAreNotAckedAfterAReconnect() async throws {
        let broker = try TestBroker.require()
        let name = uniqueName("stale")
        try await withConnection(configuration(broker, name: name)) { connection in
            let queue = uniqueName("stale")
            let plan = TopologyPlan(bundleIDs: [], retryDelays: [], queueType: .quorum)
            try await connection.declare(plan)
            try await connection.declareQueue(classicQueue(queue))
            try await connection.publish(message("first", to: queue))
            let consumer = try await connection.consume(queue: queue, prefetch: 10)
            var iterator = consumer.makeAsyncIterator()
            let old = try #require(try await iterator.next())
            #expect(!old.message.redelivered)

            try await eventually(.seconds(15), "connection listed by the management API") {
                await (try? broker.array("/connections"))?.contains { ($0["client_properties"] as? [String: Any])?["connection_name"] as? String == name } ?? false
            }
            try await broker.forceClose(connectionName: name)
            try await eventually(.seconds(15), "reconnected") { connection.connectionCount >= 2 && connection.state == .connected }

            // The same stream continues: the unacked message comes again on the new channel.
            let redelivered = try await withTimeout(.seconds(10), "redelivery") { [iterator] in
                var copy = iterator
                return try await copy.next()
            }
            let again = try #require(redelivered)
            #expect(again.text == "first" && again.message.redelivered)
            #expect(again.tag.generation != old.tag.generation)
            // Same numeric tag, different channel generation: the old one must not be sent.
            #expect(await connection.ack(old) == .stale)
            #expect(await connection.ack(again) == .settled)
            try await eventually(.seconds(30), "acked") { try await connection.inspectQueue(queue).messageCount == 0 }
            try await connection.deleteQueue(queue)
        }
    }

    @Test func publishWhileDisconnectedFailsFast() async throws {
        // Nothing listens on this port: the first connect fails with a clear error.
        let port = unreachablePort
        var configuration = AMQPConfiguration(urls: [AMQPURL(host: "127.0.0.1", port: port)], connectionName: "nobody")
        configuration.connectTimeout = .seconds(2)
        do {
            _ = try await AMQPConnection.connect(configuration: configuration, logger: testLogger())
            Issue.record("connect must fail")
        } catch let error as AMQPError {
            #expect(error.code == .connectionFailed)
            #expect(error.libraryStatus != nil)
        }
    }

    @Test func wrongPasswordIsReportedWithTheBrokersReason() async throws {
        let broker = try TestBroker.require()
        var url = try AMQPURL(string: broker.amqpURL)
        url.password = "wrong"
        do {
            _ = try await AMQPConnection.connect(configuration: AMQPConfiguration(urls: [url]), logger: testLogger())
            Issue.record("login must fail")
        } catch let error as AMQPError {
            #expect(error.code == .connectionFailed)
            #expect(error.replyCode == 403, "authentication_failure_close gives the broker's reason: \(error)")
        }
    }
}

/// Stops and restarts a broker's application: needs a node of its own.
@Suite(.enabled(if: TestBroker.isAvailable), .serialized)
struct BrokerRestartTests {
    @Test func recoversAfterStopAppWithoutLosingConfirmedMessages() async throws {
        try await withPrivateBroker { broker in
            let coordinates = broker.coordinates
            let bundle = uniqueName("com.example.restart")
            let plan = TopologyPlan(bundleIDs: [bundle], retryDelays: [.seconds(10)], queueType: .quorum)
            let workQueue = TopologyNames.workQueue(bundle)
            try await withConnection(configuration(coordinates, backoff: AMQPBackoff(initial: .milliseconds(200), maximum: .seconds(1)))) { connection in
                try await connection.declare(plan)
                func publishJobs(_ range: Range<Int>) async throws {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for i in range {
                            group.addTask {
                                try await connection.publish(AMQPOutboundMessage(
                                    exchange: TopologyNames.jobsExchange, routingKey: bundle, body: Array("job-\(i)".utf8), properties: .persistentJSON))
                            }
                        }
                        try await group.waitForAll()
                    }
                }
                try await publishJobs(0..<50)
                let consumer = try await connection.consume(queue: workQueue, prefetch: 20)
                var iterator = consumer.makeAsyncIterator()
                let held = try #require(try await iterator.next())

                try await coordinates.ctl("stop_app")
                try await eventually(.seconds(30), "connection loss noticed") { connection.state != .connected }
                await #expect(throws: AMQPError.self) { try await publishJobs(1000..<1001) }
                try await coordinates.ctl("start_app")
                try await eventually(.seconds(60), "reconnected") { connection.state == .connected && connection.connectionCount >= 2 }
                #expect(await connection.ack(held) == .stale)

                // Topology was re-declared and publishing works again.
                try await publishJobs(50..<100)
                var seen = Set<String>()
                let expected = Set((0..<100).map { "job-\($0)" })
                try await withTimeout(.seconds(60), "all confirmed jobs consumed") { [iterator] in
                    var stream = iterator
                    var received = Set<String>()
                    while received.count < 100, let delivery = try await stream.next() {
                        if expected.contains(delivery.text) { received.insert(delivery.text) }
                        await connection.ack(delivery)
                    }
                    return received
                }.forEach { seen.insert($0) }
                #expect(seen == expected, "no confirmed message was lost")
                await consumer.cancel()
            }
        }
    }
}
