import APNSAdmin
import APNSChannelManagement
import APNSConfig
import APNSModel
import APNSTransport
import APNSWorker
import ArgumentParser
import Foundation
import Logging
import Synchronization

/// Channel management clients for the configured HTTP/2 bundles (contract §7): the bundle's
/// credentials (one provider token source per team key, as the transports share), its `caFile`,
/// and Apple's channel management host and port per environment unless `channelHost`/
/// `channelPort` override them. What the admin routes and `apns-worker channels` use.
///
/// In `apns-worker run` they follow changes while running (`ConfigurationFollower`): a bundle
/// added at run time can manage its channels, a removed one cannot, and a bundle whose
/// credentials or endpoints changed (a key file's content included) uses the new ones.
final class ConfiguredChannels: BroadcastChannelManaging, ConfigurationFollower {
    private let tokens: TokenSources
    private let logger: Logger?
    private let entries: Mutex<[String: Entry]>

    /// One bundle's client settings, and what they were made from (to tell a change).
    private struct Entry {
        var bundle: BundleConfiguration
        var digests: [String?]
        var authentication: HTTP2TransportConfiguration.Authentication
    }

    init(configuration: WorkerConfiguration, tokens: TokenSources, logger: Logger? = nil) throws {
        self.tokens = tokens
        self.logger = logger
        let digests = LoadedConfiguration.digests(of: LoadedConfiguration.namedFiles(configuration))
        var entries: [String: Entry] = [:]
        for bundle in configuration.bundles where bundle.transport == .http2 {
            entries[bundle.bundleID] = try Self.entry(bundle, digests: digests, settings: configuration.worker, tokens: tokens)
        }
        self.entries = Mutex(entries)
    }

    private static func entry(
        _ bundle: BundleConfiguration, digests: [String: String], settings: WorkerSettings, tokens: TokenSources
    ) throws -> Entry {
        let authentication = try tokens.authentication(for: bundle, settings: settings)
        return Entry(bundle: bundle, digests: fileDigests(bundle, digests), authentication: authentication)
    }

    /// What a bundle's clients are made from: a change to anything else of its section (the
    /// rollout, its line in the file) leaves them as they are.
    private struct ClientInputs: Equatable {
        var auth: APNSAuthentication
        var environment: APNSEnvironment
        var caFile: String?
        var channelHost: String?
        var channelPort: Int?
        var keyScope: TokenKeyScope
    }

    private static func clientInputs(_ bundle: BundleConfiguration) -> ClientInputs {
        ClientInputs(
            auth: bundle.auth, environment: bundle.environment, caFile: bundle.caFile, channelHost: bundle.channelHost,
            channelPort: bundle.channelPort, keyScope: bundle.keyScope)
    }

    private static func fileDigests(_ bundle: BundleConfiguration, _ digests: [String: String]) -> [String?] {
        var files: [String?] = [bundle.caFile]
        switch bundle.auth {
        case .token(_, _, let keyFile): files.append(keyFile)
        case .certificate(let certFile, let keyFile): files += [certFile, keyFile]
        }
        return files.map { $0.flatMap { digests[$0] } }
    }

    func follow(_ inForce: LoadedConfiguration) async {
        let configuration = inForce.configuration
        let before = entries.withLock { $0 }
        var after: [String: Entry] = [:]
        var added: [String] = [], replaced: [String] = [], failed: [String: any Error] = [:]
        for bundle in configuration.bundles where bundle.transport == .http2 {
            let digests = Self.fileDigests(bundle, inForce.fileDigests)
            if let kept = before[bundle.bundleID], Self.clientInputs(kept.bundle) == Self.clientInputs(bundle), kept.digests == digests {
                after[bundle.bundleID] = kept
                continue
            }
            do {
                after[bundle.bundleID] = try Self.entry(bundle, digests: inForce.fileDigests, settings: configuration.worker, tokens: tokens)
                if before[bundle.bundleID] == nil { added.append(bundle.bundleID) } else { replaced.append(bundle.bundleID) }
            } catch {
                failed[bundle.bundleID] = error
            }
        }
        let removed = before.keys.filter { after[$0] == nil && failed[$0] == nil }.sorted()
        entries.withLock { $0 = after }
        var metadata: Logger.Metadata = [:]
        for (key, ids) in [("channels.added", added), ("channels.removed", removed), ("channels.replaced", replaced)] where !ids.isEmpty {
            metadata[key] = "\(ids.sorted())"
        }
        if !metadata.isEmpty { logger?.notice("broadcast channel management follows the configuration change", metadata: metadata) }
        for (bundleID, error) in failed.sorted(by: { $0.key < $1.key }) {
            logger?.error(
                "broadcast channel management unavailable for the bundle: its credentials could not be loaded",
                metadata: ["apns.bundle": "\(bundleID)", "error": "\(error)"])
        }
    }

    func defaultEnvironment(bundleID: String) -> APNSEnvironment? { entries.withLock { $0[bundleID]?.bundle.environment } }

    func client(bundleID: String, environment: APNSEnvironment) -> ChannelManagementClient? {
        guard let entry = entries.withLock({ $0[bundleID] }) else { return nil }
        let (host, port) = entry.bundle.channelEndpoint(for: environment)
        var configuration = ChannelManagementConfiguration(
            bundleID: bundleID, environment: environment, authentication: entry.authentication, host: host, port: port)
        if let caFile = entry.bundle.caFile { configuration.trustRoots = .caFile(caFile) }
        return ChannelManagementClient(configuration: configuration)
    }

    func perform(
        _ operation: ChannelOperationRequest, bundleID: String, environment: APNSEnvironment
    ) async throws(ChannelManagementError) -> ChannelManagementResult {
        guard let entry = entries.withLock({ $0[bundleID] }), let client = client(bundleID: bundleID, environment: environment) else {
            throw ChannelManagementError(status: 0, reason: "no HTTP/2 bundle \(bundleID) is configured")
        }
        // Apple's key rules, as for notifications (`PerEnvironmentTransport`): no trip to Apple for
        // what it refuses. A channel's topic is the bundle ID.
        if let refusal = entry.bundle.keyScope.refusal(environment: environment, topic: bundleID) {
            throw ChannelManagementError(
                status: refusal.status, reason: refusal.reason?.rawValue ?? "HTTP\(refusal.status)",
                notSent: "the token key of [apns \"\(bundleID)\"] cannot sign for \(environment.rawValue) \(bundleID) (keyEnvironment = \(entry.bundle.keyScope.environmentName)\(entry.bundle.keyScope.topics == nil ? "" : ", keyTopics"))")
        }
        return try await client.perform(operation)
    }
}

/// `apns-worker channels`: Apple's broadcast channels of a bundle (contract §7).
struct ChannelsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "channels",
        abstract: "Create, list, show or delete the broadcast channels (Live Activities) of a bundle on Apple's channel management service.",
        subcommands: [Create.self, List.self, Show.self, Delete.self])

    struct Options: ParsableArguments {
        @Option(name: .customLong("config"), help: "Configuration file with the bundle's [apns \"…\"] section.")
        var configPath = BrokerOptions.defaultConfigPath

        @Option(help: "The app's bundle ID (an http2 bundle of the configuration).")
        var bundle: String

        @Option(help: "production or sandbox (default: the bundle's).")
        var environment: String?

        @Flag(help: "Answer in JSON.")
        var json = false

        /// Runs one operation; Apple's refusal is one line on standard error and exit 1.
        func perform(_ operation: ChannelOperationRequest) async throws -> (ChannelManagementResult, APNSEnvironment) {
            let configuration = try loadConfiguration(configPath)
            let channels = try ConfiguredChannels(configuration: configuration, tokens: TokenSources())
            guard let defaultEnvironment = channels.defaultEnvironment(bundleID: bundle) else {
                throw ValidationError("\(configPath) has no http2 bundle \(bundle) (broadcast channels need HTTP/2)")
            }
            var target = defaultEnvironment
            if let environment {
                guard let parsed = APNSEnvironment(rawValue: environment) else {
                    throw ValidationError("--environment must be production or sandbox")
                }
                target = parsed
            }
            do {
                return (try await channels.perform(operation, bundleID: bundle, environment: target), target)
            } catch {
                FileHandle.standardError.write(Data("apns-worker channels: \(error)\n".utf8))
                throw ExitCode.failure
            }
        }

        func printJSON(_ object: [String: Any]) throws {
            let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
            print(String(decoding: data, as: UTF8.self))
        }
    }

    static func channel(_ id: String) throws -> BroadcastChannel {
        if let problem = BroadcastChannel.problem(id) { throw ValidationError("--channel \(problem)") }
        guard let channel = BroadcastChannel(id: id) else { throw ValidationError("--channel is not a channel id") }
        return channel
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a channel; prints its id as Apple issued it.")
        @OptionGroup var options: Options
        @Option(help: "0: APNs stores no message; 1: it stores the most recent one for offline devices.")
        var storagePolicy = 0

        func run() async throws {
            guard let policy = ChannelStoragePolicy(rawValue: storagePolicy) else { throw ValidationError("--storage-policy must be 0 or 1") }
            let (result, environment) = try await options.perform(.create(storagePolicy: policy))
            guard case .created(let channel) = result else { throw ExitCode.failure }
            if options.json {
                try options.printJSON([
                    "channel": channel.id, "bundleId": options.bundle, "environment": environment.rawValue, "storagePolicy": policy.rawValue,
                ])
            } else {
                print(channel.id)
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every channel of the bundle in the environment, one id a line.")
        @OptionGroup var options: Options

        func run() async throws {
            let (result, environment) = try await options.perform(.list)
            guard case .channels(let channels) = result else { throw ExitCode.failure }
            if options.json {
                try options.printJSON(["bundleId": options.bundle, "environment": environment.rawValue, "channels": channels.map(\.id)])
            } else {
                for channel in channels { print(channel.id) }
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One channel's storage policy.")
        @OptionGroup var options: Options
        @Option(help: "The channel id.")
        var channel: String

        func run() async throws {
            let (result, environment) = try await options.perform(.read(try ChannelsCommand.channel(channel)))
            guard case .channel(let shown, let policy) = result else { throw ExitCode.failure }
            if options.json {
                try options.printJSON([
                    "channel": shown.id, "bundleId": options.bundle, "environment": environment.rawValue, "storagePolicy": policy.rawValue,
                ])
            } else {
                let meaning = policy == .noMessageStored ? "no message stored" : "most recent message stored"
                print("\(shown.id) storagePolicy \(policy.rawValue) (\(meaning))")
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a channel; later broadcasts on it are ChannelNotRegistered.")
        @OptionGroup var options: Options
        @Option(help: "The channel id.")
        var channel: String

        func run() async throws {
            let target = try ChannelsCommand.channel(channel)
            let (result, environment) = try await options.perform(.delete(target))
            guard case .deleted = result else { throw ExitCode.failure }
            if options.json {
                try options.printJSON(["deleted": target.id, "bundleId": options.bundle, "environment": environment.rawValue])
            } else {
                print("deleted \(target.id)")
            }
        }
    }
}
