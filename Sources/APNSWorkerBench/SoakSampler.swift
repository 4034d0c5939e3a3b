/// One sample of what a worker holds, read from outside: its connections and channels at the
/// broker (management API, by the connection names `apns-worker run` gives its own), its file
/// descriptors, threads and resident memory (`/proc`), and its jobs in flight, held and paused
/// bundles (`/api/status` of its admin).
import APNSSoak
import Foundation

struct SoakSample: Sendable {
    var seconds: Double
    var cycle: Int
    var phase: String
    var epoch: Int
    /// Whether the slope test uses it (`SoakSchedule.isJudged`, and the worker connected with
    /// every event due carried out).
    var judged: Bool
    var brokerConnections: Int?
    var brokerChannels: Int?
    var fds: Int?
    var threads: Int?
    var rssMiB: Double?
    var inFlight: Int?
    var held: Int?
    var paused: Int?
    var brokerConnected: Bool
    var published: Int
    var delivered: Int

    static let csvHeader =
        "seconds,cycle,phase,epoch,judged,broker_connections,broker_channels,fds,threads,rss_mib,in_flight,held,paused,published,delivered"

    var csvLine: String {
        func cell<T>(_ value: T?) -> String { value.map { "\($0)" } ?? "" }
        return [
            String(format: "%.1f", seconds), "\(cycle)", phase, "\(epoch)", judged ? "1" : "0", cell(brokerConnections),
            cell(brokerChannels), cell(fds), cell(threads), rssMiB.map { String(format: "%.1f", $0) } ?? "", cell(inFlight), cell(held),
            cell(paused), "\(published)", "\(delivered)",
        ].joined(separator: ",")
    }
}

struct SoakSampler: Sendable {
    /// The names the worker's own connections carry (`apns-worker run`; its admin's reads).
    static let workerConnectionNames: Set<String> = ["apns-worker run", "apns-worker admin"]

    let pid: Int32
    let broker: SoakBroker
    let adminPort: Int

    /// Everything but the schedule's fields, which the caller fills in.
    func sample() async -> SoakSample {
        var sample = SoakSample(
            seconds: 0, cycle: 0, phase: "", epoch: 0, judged: false, brokerConnected: false, published: 0, delivered: 0)
        if let connections = await broker.managementJSON("/connections") as? [[String: Any]] {
            let ours = connections.filter { connection in
                let properties = connection["client_properties"] as? [String: Any]
                return (properties?["connection_name"] as? String).map(Self.workerConnectionNames.contains) ?? false
            }
            // A connection the management plugin has no statistics for yet (seconds after a
            // reconnect) shows no channels, or 0, though it always has its control channel: not
            // a count, so not a sample of it. Nor is a listing without the worker's connections
            // while the worker says it is connected (the listing lags a broker restart): counted
            // as 0 channels, it once made an hour's flat channels look like growth.
            let channels = ours.map { $0["channels"] as? Int ?? 0 }
            sample.brokerConnections = ours.count
            sample.brokerChannels = ours.isEmpty || channels.contains(0) ? nil : channels.reduce(0, +)
        }
        sample.fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count
        sample.threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task"))?.count
        let rss = ProcessProbe(pid: pid).rss()
        sample.rssMiB = rss > 0 ? rss : nil
        if let status = await curlJSON("http://127.0.0.1:\(adminPort)/api/status") as? [String: Any] {
            let bundles = status["bundles"] as? [[String: Any]] ?? []
            sample.inFlight = bundles.reduce(0) { $0 + ((($1["activity"] as? [String: Any])?["inFlight"] as? Int) ?? 0) }
            sample.held = bundles.filter { $0["held"] as? Bool == true }.count
            sample.paused = bundles.filter { $0["paused"] as? Bool == true }.count
            sample.brokerConnected = status["broker"] as? String == "connected"
        }
        return sample
    }

    /// The slope verdicts over the judged samples, one per resource, each with its tolerance.
    static func trends(_ samples: [SoakSample], prefetch: Int) -> [TrendVerdict] {
        let judged = samples.filter(\.judged)
        func points(_ value: (SoakSample) -> Double?) -> [TrendPoint] {
            judged.compactMap { sample in value(sample).map { TrendPoint(seconds: sample.seconds, value: $0, group: sample.epoch) } }
        }
        let rss = points { $0.rssMiB }
        return [
            ResourceTrend.judge(
                "broker channels", points { $0.brokerChannels.map(Double.init) },
                tolerance: .count(slack: 2, "a consumer's channel re-opened a moment after the sample")),
            ResourceTrend.judge(
                "broker connections", points { $0.brokerConnections.map(Double.init) },
                tolerance: .count(slack: 2, "the admin's reads open a connection of their own when first used")),
            ResourceTrend.judge(
                "file descriptors", points { $0.fds.map(Double.init) },
                tolerance: .count(slack: 4, "APNs connections re-dialled after a GOAWAY or a drop, a reload's file reads")),
            ResourceTrend.judge(
                "threads", points { $0.threads.map(Double.init) },
                tolerance: .count(slack: 4, "blocking pools start threads on first use, up to their bound")),
            ResourceTrend.judge(
                "jobs in flight", points { $0.inFlight.map(Double.init) },
                tolerance: .count(slack: Double(max(5, prefetch / 4)), "jobs being sent at the moment of the sample")),
            ResourceTrend.judge(
                "resident memory (MiB)", rss, tolerance: .memory(floorMiB: 16, fraction: 0.1, first: rss.first?.value ?? 0)),
        ]
    }
}
