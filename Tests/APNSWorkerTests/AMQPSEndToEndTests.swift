import AMQPClient
import APNSModel
import APNSSimulator
import Foundation
import Testing
import TestSupport

/// amqps end to end: the shared test broker also listens with TLS, with a certificate
/// for the host name `localhost` signed by a CA that scripts/broker.sh made. The real worker
/// consumes and publishes over it with verification on, and refuses a broker whose certificate
/// names another host or comes from a CA it does not trust.
@Suite(.serialized, .enabled(if: TestBroker.isAvailable && TestBroker.tls != nil, "needs the amqps listener that scripts/test starts"))
struct AMQPSEndToEndTests {
    static func options(host: String, caFile: String? = nil) throws -> WorkerHarness.Options {
        let tls = try #require(TestBroker.tls)
        var options = WorkerHarness.Options()
        options.workerURLs = ["amqps://guest:guest@\(host):\(tls.port)/%2f"]
        options.amqpLines = "caFile = \(caFile ?? tls.caFile)"
        return options
    }

    @Test func workerConsumesAndPublishesOverVerifiedTLS() async throws {
        let tls = try #require(TestBroker.tls)
        let broker = try TestBroker.require()
        let h = try await WorkerHarness.start(broker: broker, options: Self.options(host: "localhost"))
        let worker = try h.startWorker()
        defer { worker.kill9() }
        // Consuming: 200 good jobs. Publishing: a job APNs refuses once goes through the retry
        // queue; a malformed one is dead-lettered. Both are the worker's own publishes.
        let retried = WorkerHarness.token(9_001)
        h.simulator.script(token: retried, .failFirst(1, status: 503, reason: .serviceUnavailable))
        let ids = try await h.publishMany(200)
        let retriedID = try await h.publishJob(token: retried)
        try await h.publishRaw(Array("not json".utf8), messageID: "malformed-over-tls")
        try await waitUntil("201 delivered over amqps", timeout: .seconds(90)) { h.acceptedIDs().distinct.count == 201 }
        #expect(h.acceptedIDs().distinct == Set((ids + [retriedID]).map { $0.uuidString.lowercased() }))
        var dead: [AMQPDelivery] = []
        try await waitUntil("the malformed job's dead letter") {
            dead += try await h.drain(h.deadQueue)
            return !dead.isEmpty
        }
        #expect(dead.map(\.message.properties.messageID) == ["malformed-over-tls"])
        // The broker lists the worker's connection as TLS on the amqps port (the management API
        // learns of new connections a moment late).
        try await waitUntil("a TLS connection on port \(tls.port)") {
            let connections = try await broker.managementJSON("/connections") as? [[String: Any]] ?? []
            return connections.contains { ($0["ssl"] as? Bool) == true && ($0["port"] as? Int) == tls.port }
        }
        #expect(worker.isRunning)
        await h.shutdown()
    }

    @Test func workerRefusesACertificateForAnotherHostName() async throws {
        // The certificate names `localhost`; 127.0.0.1 reaches the same listener but is not that name.
        let h = try await WorkerHarness.start(broker: try TestBroker.require(), options: Self.options(host: "127.0.0.1"))
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let status = await worker.waitForExit(timeout: .seconds(120))
        #expect(status != nil && status != 0, "the worker exits with an error")
        let log = worker.log
        print("amqps, wrong host name: \(Self.errorLines(log))")
        #expect(log.contains("the broker's TLS certificate is not for the host name '127.0.0.1'"), "a clear error: \(log.suffix(2000))")
        await h.shutdown()
    }

    @Test func workerRefusesABrokerItsCADoesNotTrust() async throws {
        // `credentials/ca.pem` (relative to the configuration file) is the CA the harness made for
        // the simulator: a good CA file, but not the one that signed the broker's certificate.
        let h = try await WorkerHarness.start(
            broker: try TestBroker.require(), options: Self.options(host: "localhost", caFile: "credentials/ca.pem"))
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let status = await worker.waitForExit(timeout: .seconds(120))
        #expect(status != nil && status != 0, "the worker exits with an error")
        let log = worker.log
        print("amqps, untrusted CA: \(Self.errorLines(log))")
        #expect(log.contains("the broker's TLS certificate is not trusted (not signed by a CA in \(h.directory)/credentials/ca.pem"),
                "a clear error: \(log.suffix(2000))")
        await h.shutdown()
    }

    /// `[amqp] caFile` is restart-only: its certificates are read once, at start-up. librabbitmq
    /// read the file at every connect, so a file truncated while the worker ran (a rotation gone
    /// wrong) took effect at the next broker blip, and the worker reconnected in a loop, delivering
    /// nothing, until its restart.
    @Test func aCAFileTruncatedWhileRunningTakesNoEffectAtTheNextReconnect() async throws {
        let tls = try #require(TestBroker.tls)
        let broker = try TestBroker.require()
        let h = try await WorkerHarness.start(broker: broker, options: Self.options(host: "localhost", caFile: "broker-ca.pem"))
        let caFile = h.directory + "/broker-ca.pem"
        try FileManager.default.copyItem(atPath: tls.caFile, toPath: caFile)
        let worker = try h.startWorker()
        defer { worker.kill9() }
        let before = try await h.publishMany(20)
        try await waitUntil("20 delivered over amqps", timeout: .seconds(90)) { h.acceptedIDs().distinct.count == 20 }

        try Data().write(to: URL(fileURLWithPath: caFile))
        // The broker closes the worker's TLS connections, as a restart or failover would (the
        // management API lists a new connection a moment late).
        var closed: Set<String> = []
        try await waitUntil("the worker's TLS connection listed") {
            closed = try await Self.tlsConnectionNames(broker, port: tls.port)
            return !closed.isEmpty
        }
        for name in closed {
            let encoded = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? name
            let result = try await runProcess(
                "/usr/bin/curl", ["-fsS", "-u", "guest:guest", "-X", "DELETE", broker.managementURL + "/api/connections/" + encoded])
            #expect(result.status == 0, "\(result.stderr)")
        }
        try await waitUntil("the worker connected again over amqps", timeout: .seconds(90)) {
            !(try await Self.tlsConnectionNames(broker, port: tls.port)).subtracting(closed).isEmpty
        }
        let after = try await h.publishMany(20)
        try await waitUntil("20 more delivered after the reconnect", timeout: .seconds(90)) { h.acceptedIDs().distinct.count == 40 }
        #expect(h.acceptedIDs().distinct == Set((before + after).map { $0.uuidString.lowercased() }))
        #expect(!worker.log.contains("cannot load CA file"), "\(worker.log.suffix(2000))")
        #expect(worker.isRunning)
        await h.shutdown()
    }

    /// The names of the broker's connections on its amqps port.
    static func tlsConnectionNames(_ broker: BrokerCoordinates, port: Int) async throws -> Set<String> {
        let connections = try await broker.managementJSON("/connections") as? [[String: Any]] ?? []
        return Set(connections.filter { ($0["ssl"] as? Bool) == true && ($0["port"] as? Int) == port }.compactMap { $0["name"] as? String })
    }

    static func errorLines(_ log: String) -> String {
        log.split(separator: "\n").filter { $0.lowercased().contains("error") }.suffix(3).joined(separator: " | ")
    }
}
