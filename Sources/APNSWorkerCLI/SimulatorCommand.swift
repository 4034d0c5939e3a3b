/// `apns-worker simulator`: runs the APNs simulator in the foreground for a local run of the
/// worker, generating throwaway credentials on first use.
import APNSModel
import APNSSimulator
import ArgumentParser
import Foundation
import Logging
import ServiceClock
import ServiceLifecycle
import UnixSignals

struct SimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulator",
        abstract: "Run a local APNs simulator that validates requests as Apple does: TLS + HTTP/2, and the legacy binary gateway and feedback service.",
        discussion: """
            Credentials (CA, server and client certificates, AuthKey_<key-id>.p8) are read from \
            --credentials, and generated there when missing. Point the worker at it with \
            host = 127.0.0.1, port = <port>, caFile = <credentials>/ca.pem and the .p8 key. \
            --binary-port and --feedback-port add Apple's legacy binary gateway and feedback \
            service (TLS, client certificate <credentials>/client.pem and client.key required). \
            --channel-port adds Apple's channel management service for broadcast push (point the \
            worker at it with channelHost and channelPort); broadcasts go to --port, as at Apple.
            """
    )

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on (0 = any free port).")
    var port = 8443

    @Option(help: "Port of the legacy binary provider gateway (Apple's 2195; 0 = any free port; none when absent).")
    var binaryPort: Int?

    @Option(help: "Port of the legacy feedback service (Apple's 2196; 0 = any free port; none when absent).")
    var feedbackPort: Int?

    @Option(help: "Port of Apple's channel management service for broadcast push (Apple's 2195/2196; 0 = any free port; none when absent).")
    var channelPort: Int?

    @Option(help: "Binary gateway: after this many frames on a connection, answer status 10 (shutdown) and close.")
    var binaryShutdownAfter: Int?

    @Option(help: "Binary gateway: after this many frames on a connection, close without an error response.")
    var binaryCloseAfter: Int?

    @Option(help: "Directory of the simulator's credentials; generated when missing.")
    var credentials = ".local/credentials"

    @Option(
        name: .customLong("server-name"),
        help: "An extra DNS name for the generated server certificate, beside localhost and 127.0.0.1 (repeatable; e.g. the compose service name).")
    var serverNames: [String] = []

    @Option(
        name: .customLong("bundle"),
        help: "A bundle ID the simulator accepts, optionally with the team that owns it: ID or ID:TEAM (repeatable; another team's token for its topics is 400 TopicDisallowed).")
    var bundles: [String] = []

    @Option(help: "Team ID of the generated provider token key.")
    var teamID = "TEAM123456"

    @Option(help: "Key ID of the generated provider token key.")
    var keyID = "KEY1234567"

    @Option(
        name: .customLong("key"),
        help: """
            Another provider token key to accept, TEAM:KEYID:FILE[:sandbox|production|both[:TOPIC,TOPIC...]]             (repeatable). FILE is the .p8 key or its PEM public key; an environment limits the key to it             (the other environment's simulator answers 403 BadEnvironmentKeyInToken); topics make it a             topic-specific key (other topics: 400 TopicDisallowed). A --key with the generated key's ID replaces it.
            """)
    var keys: [String] = []

    @Option(help: "SETTINGS_MAX_CONCURRENT_STREAMS advertised to clients.")
    var maxStreams = 1000

    @Option(help: "Advertise this many streams until a connection's first valid provider token, as Apple does.")
    var streamsBeforeToken: Int?

    @Option(help: "Environment: production or sandbox (sandbox adds apns-unique-id).")
    var environment: String = "production"

    @Option(name: .customLong("fail-rate-429"), help: "Fraction (0.0-1.0) of valid requests answered 429 TooManyRequests.")
    var failRate429: Double = 0

    @Option(name: .customLong("fail-rate-500"), help: "Fraction (0.0-1.0) of valid requests answered 500 InternalServerError.")
    var failRate500: Double = 0

    @Option(name: .customLong("fail-rate-503"), help: "Fraction (0.0-1.0) of valid requests answered 503 ServiceUnavailable.")
    var failRate503: Double = 0

    @Option(help: "Seed for the fault rates' random generator.")
    var seed: UInt64 = 1

    @Option(help: "Latency added to every answer, in milliseconds.")
    var latencyMs: Int = 0

    @Option(help: "Send GOAWAY on each connection after this many streams.")
    var goawayAfter: Int?

    @Option(help: "Drop each connection abruptly after this many streams.")
    var dropAfter: Int?

    @Flag(help: "Answer every request 403 InvalidProviderToken.")
    var rejectAll = false

    @Option(
        name: .customLong("unregistered"),
        help: "A device token (hex) answered 410 Unregistered, as for an uninstalled app (repeatable; the worker publishes feedback for it).")
    var unregisteredTokens: [String] = []

    @Option(help: "Seconds between summary lines (0 = none).")
    var summaryEvery: Int = 10

    func validate() throws {
        guard APNSEnvironment(rawValue: environment) != nil else {
            throw ValidationError("--environment must be production or sandbox")
        }
        for rate in [failRate429, failRate500, failRate503] where !(0...1).contains(rate) {
            throw ValidationError("fail rates are fractions between 0.0 and 1.0")
        }
        for key in keys {
            do { _ = try SimulatorKeySpec.parse(key) } catch { throw ValidationError(error.description) }
        }
        for bundle in bundles where bundle.split(separator: ":", omittingEmptySubsequences: false).count > 2 {
            throw ValidationError("--bundle \(bundle): use ID or ID:TEAM")
        }
    }

    /// `TEAM:KEYID:environment`, with the number of topics of a topic-specific key.
    static func describe(_ key: SimulatorTokenKey) -> String {
        let topics = key.topics.map { ":\($0.count) topics" } ?? ""
        return "\(key.teamID):\(key.keyID):\(key.environment?.rawValue ?? "both")\(topics)"
    }

    /// `--bundle ID[:TEAM]`: the bundle IDs, and the owners named.
    var bundleOwners: (ids: [String], teams: [String: String]) {
        var ids: [String] = []
        var teams: [String: String] = [:]
        for bundle in bundles {
            let parts = bundle.split(separator: ":", maxSplits: 1).map(String.init)
            guard let id = parts.first else { continue }
            ids.append(id)
            if parts.count == 2 { teams[id] = parts[1] }
        }
        return (ids, teams)
    }

    func run() async throws {
        LoggingSystem.bootstrap(StreamLogHandler.standardError)
        // APNS_WORKER_LOG_LEVEL applies here too (debug shows every request the simulator judges).
        let logger = makeLogger("apns-worker.simulator")

        let generated = try SimulatorCredentials.loadOrGenerate(
            directory: credentials, teamID: teamID, keyID: keyID, serverNames: serverNames)
        let extraKeys = try keys.map { try SimulatorKeySpec.parse($0).load() }
        let owners = bundleOwners
        var configuration = SimulatorConfiguration(
            host: host, port: port, binaryPort: binaryPort, feedbackPort: feedbackPort, channelPort: channelPort,
            tls: generated.tlsConfiguration(),
            bundleIDs: owners.ids.isEmpty ? ["com.example.app", "com.example.legacy"] : owners.ids,
            tokenKeys: (extraKeys.contains { $0.keyID == keyID } ? [] : [generated.tokenKey]) + extraKeys,
            maxConcurrentStreams: maxStreams, maxConcurrentStreamsBeforeFirstToken: streamsBeforeToken,
            environment: APNSEnvironment(rawValue: environment) ?? .production)
        configuration.bundleTeams = owners.teams
        let simulator = try await APNSSimulator.start(configuration, logger: logger)
        simulator.setFaults(
            SimulatorFaults(
                rate429: failRate429, rate500: failRate500, rate503: failRate503, seed: seed,
                latency: .milliseconds(latencyMs), goawayAfterStreams: goawayAfter, dropAfterStreams: dropAfter,
                rejectAllTokens: rejectAll ? .invalidProviderToken : nil, binaryShutdownAfterFrames: binaryShutdownAfter,
                binaryCloseSilentlyAfterFrames: binaryCloseAfter))
        let startedAt = Int64(Date().timeIntervalSince1970 * 1000)
        for token in unregisteredTokens { simulator.script(token: token, .unregistered(timestamp: startedAt)) }
        logger.info(
            "simulator credentials",
            metadata: [
                "simulator.ca": "\(generated.caCertificatePath)", "simulator.tokenKey": "\(generated.tokenKeyPath)",
                "simulator.teamID": "\(teamID)", "simulator.keyID": "\(keyID)",
                "simulator.keys": "\(configuration.tokenKeys.map(Self.describe).joined(separator: ", "))",
            ])

        var services: [any Service] = [simulator]
        if summaryEvery > 0 {
            services.append(SimulatorSummary(simulator: simulator, interval: .seconds(summaryEvery), logger: logger))
        }
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}

/// Logs one line of counters per interval when anything changed.
struct SimulatorSummary: Service {
    let simulator: APNSSimulator
    let interval: Duration
    let logger: Logger

    func run() async throws {
        var last = SimulatorCounters()
        await Periodic.run(every: interval, on: SystemConsumerClock(), start: .afterInterval) { summarize(since: &last) }
        // Stopped: the counters since the last line, once more.
        summarize(since: &last)
    }

    private func summarize(since last: inout SimulatorCounters) {
        let now = simulator.counters()
        guard now != last else { return }
        let reasons = now.byReason.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        var metadata: Logger.Metadata = [
            "simulator.received": "\(now.received)", "simulator.accepted": "\(now.accepted)",
            "simulator.rejected": "\(now.rejected)", "simulator.reasons": "\(reasons)",
            "simulator.connections": "\(now.openConnections)/\(now.connections)",
        ]
        if simulator.binaryPort != nil {
            let statuses = now.binaryByStatus.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
            metadata["simulator.binary.received"] = "\(now.binaryReceived)"
            metadata["simulator.binary.accepted"] = "\(now.binaryAccepted)"
            metadata["simulator.binary.statuses"] = "\(statuses)"
            metadata["simulator.binary.connections"] = "\(now.openBinaryConnections)/\(now.binaryConnections)"
        }
        if simulator.feedbackPort != nil {
            metadata["simulator.feedback.served"] = "\(now.feedbackTuplesServed)"
        }
        if simulator.channelPort != nil {
            // What each broadcast channel received: how the local run shows a broadcast arriving.
            let channels = simulator.channels().map { "\($0.id)=\($0.received)" }.joined(separator: ",")
            metadata["simulator.broadcasts"] = "\(now.broadcastsAccepted)"
            metadata["simulator.channels"] = "\(channels)"
        }
        logger.info("simulator summary", metadata: metadata)
        last = now
    }
}
