/// `apns-worker-bench attack bodies`: the worst case of "bodies held at once" (docs/inputs.md,
/// "Still open"): every consumer of the worker takes as many messages as its prefetch allows,
/// each at its 64 KiB body limit, and none of them ends. Jobs: `--body-bundles` bundles, each
/// with more jobs than its prefetch share of the in-flight budget, every job padded to the limit
/// with JSON whitespace (valid, so it is sent and held), and the simulator answering nothing for
/// an hour (`[worker] requestTimeout = 5m`). Then, while those are held: forged heartbeats of
/// about 62 KiB on `apns.fleet` and, with `--postgres-url`, registrations and group jobs padded
/// to 64 KiB on `apns.registry` and `apns.groups`. Figures only: the peak RSS (`VmHWM`).
import AMQPClient
import APNSConfig
import APNSFleet
import APNSModel
import APNSRegistryMessages
import APNSTopologyNames
import APNSTopology
import ArgumentParser
import Foundation

extension AttackBench {
    /// `body` with JSON whitespace after its opening brace, to `size` bytes.
    static func padded(_ body: String, to size: Int) -> [UInt8] {
        let bytes = Array(body.utf8)
        guard bytes.count < size, bytes.first == UInt8(ascii: "{") else { return bytes }
        return [bytes[0]] + [UInt8](repeating: UInt8(ascii: " "), count: size - bytes.count) + bytes[1...]
    }

    /// Whether every `apns.fleet.instance.*` queue is empty, by the management API.
    func fleetQueuesEmpty(management: String) -> Bool {
        let curl = Process()
        curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        curl.arguments = ["-s", "-m", "30", "-u", "guest:guest", management + "/api/queues/%2f?columns=name,messages"]
        let out = Pipe()
        curl.standardOutput = out
        guard (try? curl.run()) != nil else { return false }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        curl.waitUntilExit()
        guard let queues = (try? JSONSerialization.jsonObject(with: data)) as? [[String: Any]] else { return false }
        let fleet = queues.filter { ($0["name"] as? String)?.hasPrefix("apns.fleet.instance.") == true }
        return !fleet.isEmpty && fleet.allSatisfy { ($0["messages"] as? Int) == 0 }
    }

    func bodies(_ connection: AMQPConnection, _ probe: ProcessProbe, _ process: Process, bundles: [String]) async throws {
        let limit = JobParser.Limits().maxBodyBytes
        let budget = InFlightBudget(maxInFlight: InFlightBudget.defaultMaxInFlight, prefetch: 500).share(bundles: bundles.count)
        let perBundle = budget.perBundle + 100
        for bundle in bundles {
            try await BenchWorkerSetup.waitUntil(limit: .seconds(60)) {
                (try? await connection.inspectQueue(TopologyNames.workQueue(bundle))) != nil
            }
            for index in 0..<perBundle {
                let token = String(format: "%064x", index + 1)
                let body = Self.padded(#"{"token":"\#(token)","payload":{"aps":{"alert":"attack \#(index)"}}}"#, to: limit)
                try await connection.publish(
                    AMQPOutboundMessage(exchange: "", routingKey: TopologyNames.workQueue(bundle), body: body, properties: .persistentJSON))
            }
        }
        // Every bundle's consumer holds its whole share once only the excess is left ready.
        try await BenchWorkerSetup.waitUntil(limit: .seconds(600)) {
            var ready = 0
            for bundle in bundles { ready += Int((try? await connection.inspectQueue(TopologyNames.workQueue(bundle)))?.messageCount ?? 0) }
            return ready == bundles.count * (perBundle - budget.perBundle)
        }
        print(
            "bodies: \(budget.total) jobs of \(limit / 1024) KiB in flight (\(bundles.count) bundles × prefetch \(budget.perBundle)), APNs silent; "
                + "peak RSS \(String(format: "%.1f", probe.peakRSS())) MiB, now \(String(format: "%.1f", probe.rss())) MiB")

        // The fleet listener's prefetch (100) of heartbeats just under 64 KiB, several times over.
        let heartbeats = 500
        for n in 0..<heartbeats {
            let keys = (0..<170).map { index -> String in
                let head = "forged.\(n).\(index)."
                return head + String(repeating: "x", count: FleetInstance.maxBundleKeyBytes - head.utf8.count)
            }
            let instance = FleetInstance(
                id: "forged-\(n)", host: "forger", pid: 1, version: "6.6.6", startedAt: Date(), rssBytes: 1, cpuSeconds: 0,
                broker: "connected", heartbeatInterval: 60,
                bundles: Dictionary(uniqueKeysWithValues: keys.map { ($0, FleetInstance.Bundle()) }))
            try await connection.publish(
                AMQPOutboundMessage(
                    exchange: TopologyNames.fleetExchange, routingKey: "", body: FleetMessage.heartbeat(instance).encoded(),
                    properties: AMQPProperties(contentType: "application/json", deliveryMode: 1), mandatory: false))
        }
        var consumed = "fleet: \(heartbeats) heartbeats"
        if postgresURL != nil {
            // Registrations (prefetch 64) and group jobs (prefetch 4) at the 64 KiB limit: valid,
            // so each is applied or fanned out (to a group nobody is in) rather than dead-lettered.
            let registrations = 2_000, groupJobs = 200
            for index in 0..<registrations {
                let body = Self.padded(
                    #"{"op":"register","bundleId":"\#(bundles[0])","token":"\#(String(format: "%064x", index + 1))","group":"attack","at":\#(1_000 + index)}"#,
                    to: RegistrationMessage.maxBodyBytes)
                try await connection.publish(AMQPOutboundMessage(exchange: TopologyNames.registry, routingKey: "", body: body, properties: .persistentJSON))
            }
            for index in 0..<groupJobs {
                let body = Self.padded(
                    #"{"group":"attack-nobody-\#(index)","id":"\#(UUID().uuidString)","payload":{"aps":{"content-available":1}}}"#, to: limit)
                try await connection.publish(AMQPOutboundMessage(exchange: TopologyNames.groups, routingKey: "", body: body, properties: .persistentJSON))
            }
            try await BenchWorkerSetup.waitUntil(limit: .seconds(900)) {
                let registry = try? await connection.inspectQueue(TopologyNames.registry)
                let groups = try? await connection.inspectQueue(TopologyNames.groups)
                return registry?.messageCount == 0 && groups?.messageCount == 0
            }
            consumed += ", registry: \(registrations) registrations, groups: \(groupJobs) group jobs (all taken)"
        }
        // The heartbeats are decoded at the listener's pace; its queue is exclusive to the
        // worker's connection, so the broker's management API says when it is empty (polling
        // `/api/fleet` instead would add the answer's own memory to the figure).
        let management = ProcessInfo.processInfo.environment["APNS_TEST_RABBITMQ_MGMT_URL"] ?? "http://127.0.0.1:15672"
        try await BenchWorkerSetup.waitUntil(limit: .seconds(900)) {
            try await Task.sleep(for: .seconds(1))
            return fleetQueuesEmpty(management: management)
        }
        print(
            """
            bodies: \(consumed) while the jobs were held; \
            peak RSS \(String(format: "%.1f", probe.peakRSS())) MiB, now \(String(format: "%.1f", probe.rss())) MiB; worker alive: \(process.isRunning)
            """)
    }
}
