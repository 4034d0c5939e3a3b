import AMQPClient
import APNSModel
import APNSTopologyNames
import APNSWorkerClient
import ArgumentParser
import Foundation

/// `apns-worker publish`: publishes jobs exactly as the sync server would (contract §2, §6),
/// through `APNSWorkerClient`: validated by the worker's own parsers first, then confirmed.
struct PublishCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
        abstract: "Publish a notification job to apns.jobs (or a group job to apns.groups) as the sync server would.")

    @OptionGroup var broker: BrokerOptions

    @Option(help: "The app's bundle ID (routing key).")
    var bundle: String?

    @Option(help: "Device token, hexadecimal.")
    var token: String?

    @Option(help: "A broadcast job (contract §7): the channel id Apple issued, instead of --token.")
    var channel: String?

    @Option(help: "A group job (contract §6) for every active device of this group, instead of --bundle/--token.")
    var group: String?

    @Option(name: .customLong("except"), help: "With --group: a token not to notify (repeatable).")
    var exceptTokens: [String] = []

    @Option(name: .customLong("only-bundle"), help: "With --group: only devices of this bundle ID (repeatable).")
    var onlyBundles: [String] = []

    @Option(help: "Alert text; builds {\"aps\":{\"alert\":TEXT}}.")
    var alert: String?

    @Option(help: "The whole APNs payload as JSON (instead of --alert).")
    var payload: String?

    @Option(help: "apns-push-type (default from the payload).")
    var pushType: String?

    @Option(help: "apns-priority: 10, 5 or 1.")
    var priority: Int?

    @Option(help: "production or sandbox (default: the bundle's).")
    var environment: String?

    @Option(help: "userInfo.syncServer, for the rollout gate.")
    var syncServer: String?

    @Option(help: "Job id (canonical UUID); default a new one per job.")
    var id: String?

    @Option(help: "How many jobs to publish.")
    var count: Int = 1

    func run() async throws {
        guard alert != nil || payload != nil else { throw ValidationError("give --alert or --payload") }
        guard count >= 1 else { throw ValidationError("--count must be at least 1") }
        if group == nil {
            guard bundle != nil, (token == nil) != (channel == nil) else {
                throw ValidationError("give --bundle and --token (or --channel for a broadcast), or --group")
            }
        } else {
            guard bundle == nil, token == nil, channel == nil, environment == nil else {
                throw ValidationError("--group reaches the group's devices: no --bundle, --token or --environment")
            }
        }
        if let payload, (try? JSONSerialization.jsonObject(with: Data(payload.utf8))) == nil {
            throw ValidationError("--payload is not JSON")
        }
        let apnsPayload = payload.map(APNSPayload.init(json:)) ?? .alert(alert ?? "")
        var options = DeliveryOptions(priority: priority)
        if let pushType {
            guard let type = PushType(rawValue: pushType) else {
                throw ValidationError("--push-type: one of \(PushType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            options.pushType = type
        }
        if let syncServer { options.userInfo = ["syncServer": syncServer] }
        let fixedID = try id.map { text in
            guard let uuid = UUID(uuidString: text) else { throw ValidationError("--id must be a canonical UUID") }
            return uuid
        }
        let jobEnvironment = try environment.map { name in
            guard let value = APNSEnvironment(rawValue: name) else { throw ValidationError("--environment: production or sandbox") }
            return value
        }
        let client = try await APNSWorkerClient.connect(
            configuration: try broker.amqpConfiguration(connectionName: "apns-worker publish"), logger: broker.logger("apns-worker.publish"))
        for _ in 0..<count {
            let jobID = fixedID ?? UUID()
            do {
                if let group {
                    try await client.publish(GroupNotificationJob(
                        group: group, payload: apnsPayload, options: options, except: exceptTokens,
                        bundleIDs: onlyBundles.isEmpty ? nil : onlyBundles, id: jobID))
                    print("published \(jobID.uuidString.lowercased()) to \(TopologyNames.groups) (confirmed)")
                } else if let bundle, let token {
                    try await client.publish(NotificationJob(
                        bundleID: bundle, token: token, payload: apnsPayload, options: options, environment: jobEnvironment, id: jobID))
                    print("published \(jobID.uuidString.lowercased()) to \(TopologyNames.jobsExchange) with key \(bundle) (confirmed)")
                } else if let bundle, let channel {
                    try await client.publish(BroadcastJob(
                        bundleID: bundle, channel: channel, payload: apnsPayload, options: options, environment: jobEnvironment, id: jobID))
                    print("published \(jobID.uuidString.lowercased()) to \(TopologyNames.jobsExchange) with key \(bundle) (confirmed)")
                }
            } catch {
                switch error {
                case .invalidMessage, .payloadTooLarge: failWithLine("the worker would refuse this job, nothing published: \(error)")
                default: failWithLine("not published: \(error)")
                }
            }
        }
        await client.close()
    }
}
