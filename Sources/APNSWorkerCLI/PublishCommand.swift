import AMQPClient
import APNSCore
import ArgumentParser
import Foundation

/// `apns-worker publish`: publishes jobs exactly as the sync server would (contract §2), with
/// publisher confirms, for testing and scripts.
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
        let payloadObject: Any
        if let payload {
            guard let object = try? JSONSerialization.jsonObject(with: Data(payload.utf8)) else {
                throw ValidationError("--payload is not JSON")
            }
            payloadObject = object
        } else {
            payloadObject = ["aps": ["alert": alert ?? ""]]
        }
        let amqp = try broker.amqpConfiguration(connectionName: "apns-worker publish")
        let logger = makeLogger("apns-worker.publish")
        try await AMQPConnection.withConnection(configuration: amqp, logger: logger) { connection in
            for _ in 0..<count {
                let jobID = id ?? UUID().uuidString
                var job: [String: Any] = ["payload": payloadObject, "id": jobID]
                if let token { job["token"] = token }
                if let channel { job["channel"] = channel }
                if let group { job["group"] = group }
                if !exceptTokens.isEmpty { job["except"] = exceptTokens }
                if !onlyBundles.isEmpty { job["bundleIds"] = onlyBundles }
                if let pushType { job["pushType"] = pushType }
                if let priority { job["priority"] = priority }
                if let environment { job["environment"] = environment }
                if let syncServer { job["userInfo"] = ["syncServer": syncServer] }
                let body = try JSONSerialization.data(withJSONObject: job, options: [.sortedKeys])
                var properties = AMQPProperties.persistentJSON
                properties.messageID = jobID
                properties.timestamp = Date()
                let exchange = group == nil ? TopologyNames.jobsExchange : TopologyNames.groups
                let routingKey = bundle ?? ""
                try await connection.publish(
                    AMQPOutboundMessage(exchange: exchange, routingKey: routingKey, body: Array(body), properties: properties))
                print("published \(jobID) to \(exchange)\(group == nil ? " with key \(routingKey)" : "") (confirmed)")
            }
        }
    }
}
