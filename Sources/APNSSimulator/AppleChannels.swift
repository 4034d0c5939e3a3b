/// Apple's broadcast channels as the simulator keeps them: Apple's rules from "Sending channel
/// management requests to APNs" and "Sending broadcast push notification requests to APNs",
/// stated here on their own (not borrowed from the worker's `BroadcastChannel`), and what each
/// channel received. Pure: no IO; `SimulatorEngine` holds one under its lock.
///
/// One simulator is one APNs environment, so Apple's limit of 10,000 channels "in the
/// development and production environment, respectively" is 10,000 per bundle here.
import Foundation

/// Apple's documented values for channels.
enum AppleChannelRules {
    /// Channels one bundle may hold in one environment.
    static let channelLimit = 10_000
    /// The only push type a channel is created for (the create body's `push-type`).
    static let channelPushType = "LiveActivity"
    /// The only `apns-push-type` a broadcast request may carry.
    static let broadcastPushType = "liveactivity"
    /// `message-storage-policy`: 0 keeps no message, 1 keeps the most recent one.
    static let storagePolicies: Set<Int> = [0, 1]
    /// The largest broadcast payload in bytes.
    static let maximumBroadcastPayloadBytes = 5120
    /// Channel ids this simulator issues: base64 of 16 random bytes, as Apple's look.
    static let issuedIDBytes = 16
    /// The longest `apns-channel-id` the simulator reads; longer ones are `BadChannelId`.
    static let maximumChannelIDLength = 256

    /// Whether `id` is base64 as Apple issues it (standard alphabet, `=` padding, whole groups).
    static func isWellFormedChannelID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard !bytes.isEmpty, bytes.count <= maximumChannelIDLength, bytes.count % 4 == 0 else { return false }
        return Data(base64Encoded: id) != nil
    }
}

/// One channel the simulator issued and has not deleted.
public struct SimulatorChannel: Sendable, Hashable {
    public var id: String
    public var bundleID: String
    public var storagePolicy: Int
    /// Broadcasts answered 200 on it.
    public var received: Int
    /// The payload of the last broadcast answered 200 on it.
    public var lastPayload: [UInt8]?
}

/// The channels of every bundle, with Apple's limit.
struct ChannelBook {
    private var channels: [String: SimulatorChannel] = [:]
    private var countByBundle: [String: Int] = [:]
    /// Ids deleted since start: a broadcast on them is `ChannelNotRegistered`, like any unknown id.
    private(set) var deleted: Set<String> = []

    enum CreateResult: Equatable {
        case created(String)
        case limitReached
    }

    /// A new channel for `bundleID`; `makeID` gives candidate ids (random in the simulator).
    mutating func create(bundleID: String, storagePolicy: Int, makeID: () -> String) -> CreateResult {
        guard countByBundle[bundleID, default: 0] < AppleChannelRules.channelLimit else { return .limitReached }
        var id = makeID()
        while channels[id] != nil || deleted.contains(id) { id = makeID() }
        channels[id] = SimulatorChannel(id: id, bundleID: bundleID, storagePolicy: storagePolicy, received: 0, lastPayload: nil)
        countByBundle[bundleID, default: 0] += 1
        return .created(id)
    }

    /// The channel when it exists for this bundle (a channel of another bundle does not).
    func channel(_ id: String, bundleID: String) -> SimulatorChannel? {
        guard let channel = channels[id], channel.bundleID == bundleID else { return nil }
        return channel
    }

    /// Deletes the channel; false when it does not exist for this bundle.
    mutating func delete(_ id: String, bundleID: String) -> Bool {
        guard channel(id, bundleID: bundleID) != nil else { return false }
        channels[id] = nil
        countByBundle[bundleID, default: 1] -= 1
        deleted.insert(id)
        return true
    }

    /// The bundle's channel ids, oldest first is not promised (Apple promises no order): sorted.
    func list(bundleID: String) -> [String] {
        channels.values.filter { $0.bundleID == bundleID }.map(\.id).sorted()
    }

    /// Counts a broadcast answered 200; false when the channel does not exist for this bundle.
    mutating func received(_ id: String, bundleID: String, payload: [UInt8]) -> Bool {
        guard var channel = channel(id, bundleID: bundleID) else { return false }
        channel.received += 1
        channel.lastPayload = payload
        channels[id] = channel
        return true
    }

    var all: [SimulatorChannel] { channels.values.sorted { $0.id < $1.id } }
}
