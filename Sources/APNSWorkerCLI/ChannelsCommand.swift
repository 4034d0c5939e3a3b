import APNSAdmin
import APNSChannelManagement
import APNSConfig
import APNSModel
import APNSTransport
import ArgumentParser
import Foundation

/// Channel management clients for the configured HTTP/2 bundles (contract §7): the bundle's
/// credentials (one provider token source per team key, as the transports share), its `caFile`,
/// and Apple's channel management host and port per environment unless `channelHost`/
/// `channelPort` override them. What the admin routes and `apns-worker channels` use.
final class ConfiguredChannels: BroadcastChannelManaging {
    private let bundles: [String: BundleConfiguration]
    private let authentications: [String: HTTP2TransportConfiguration.Authentication]

    init(configuration: WorkerConfiguration, tokens: TokenSources) throws {
        var bundles: [String: BundleConfiguration] = [:]
        var authentications: [String: HTTP2TransportConfiguration.Authentication] = [:]
        for bundle in configuration.bundles where bundle.transport == .http2 {
            bundles[bundle.bundleID] = bundle
            switch bundle.auth {
            case .token(let teamID, let keyID, let keyFile):
                // The pools' token: the key's digest names the source (one JWT per key).
                guard case .token(_, _, let keyDigest) = try TransportPoolKey.reading(bundle: bundle, environment: bundle.environment).credential
                else { continue }
                authentications[bundle.bundleID] = .token(
                    try tokens.source(
                        teamID: teamID, keyID: keyID, keyFile: keyFile, keyDigest: keyDigest, maximumAge: configuration.worker.providerTokenRefresh))
            case .certificate(let certFile, let keyFile):
                authentications[bundle.bundleID] = .certificate(certFile: certFile, keyFile: keyFile)
            }
        }
        self.bundles = bundles
        self.authentications = authentications
    }

    func defaultEnvironment(bundleID: String) -> APNSEnvironment? { bundles[bundleID]?.environment }

    func client(bundleID: String, environment: APNSEnvironment) -> ChannelManagementClient? {
        guard let bundle = bundles[bundleID], let authentication = authentications[bundleID] else { return nil }
        let (host, port) = bundle.channelEndpoint(for: environment)
        var configuration = ChannelManagementConfiguration(
            bundleID: bundleID, environment: environment, authentication: authentication, host: host, port: port)
        if let caFile = bundle.caFile { configuration.trustRoots = .caFile(caFile) }
        return ChannelManagementClient(configuration: configuration)
    }

    func perform(
        _ operation: ChannelOperationRequest, bundleID: String, environment: APNSEnvironment
    ) async throws(ChannelManagementError) -> ChannelManagementResult {
        guard let client = client(bundleID: bundleID, environment: environment) else {
            throw ChannelManagementError(status: 0, reason: "no HTTP/2 bundle \(bundleID) is configured")
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
