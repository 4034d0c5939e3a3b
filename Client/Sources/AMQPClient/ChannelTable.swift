/// The channels of one connection, as a value with no IO: which are open and in which
/// generation, and which numbers consumers get. Every channel opened, across reconnects, gets a
/// new generation; a delivery tag is honoured only while its channel's generation is still open
/// (`AMQPDeliveryTag`). Channel 1 carries RPCs, 2 publishes (confirm mode), 3 `basic.get`, 4 and
/// up one consumer each, numbers reused once freed, the longest freed first, and never before
/// every frame read up to the close has been handled (`frameQueueDrained`).
///
/// A consumer channel outlives its consumer: one its owner released with every delivery settled
/// (`spare`) is taken by the next consumer instead of a new channel (`takeSpare`), so stopping
/// and starting consumers (pauses, holds, reloads) never adds channels towards the broker's
/// `channel_max`; closing it instead is not safe, as acks sent just before a close can be
/// applied after it on a quorum queue and their jobs delivered again.
///
/// `basic.get` has a channel of its own because a channel that closes hands every delivery
/// not yet acked on it back to the queue: on the control channel, any RPC the broker refuses (a
/// passive declare of a fleet pause marker that does not exist is one, every heartbeat) closed it
/// between a held bundle's probe and its ack, and the probe's job came back beside the copy the
/// probe had already published (a duplicate, seen in CI, `KeyScopeHoldEndToEndTests`).
struct ChannelTable: Equatable {
    static let control: UInt16 = 1
    static let publish: UInt16 = 2
    static let get: UInt16 = 3
    static let firstConsumer: UInt16 = 4

    /// Channel number → generation of the channels open now.
    private(set) var generations: [UInt16: UInt64] = [:]
    private var nextGeneration: UInt64 = 1
    private var freeConsumerChannels: [UInt16] = []
    /// Numbers closed since the frame queue last drained: frames of the old channel may still
    /// wait in librabbitmq's queue (a quorum queue sends deliveries after `basic.cancel-ok`,
    /// and an RPC queues what it reads meanwhile), and on a number given again they would be
    /// taken as the new consumer's (as a re-consume once did: jobs worked twice, others acked
    /// with a tag of another channel's sequence).
    private var closedUntilDrained: [UInt16] = []
    private var nextConsumerChannel = ChannelTable.firstConsumer
    /// Open consumer channels without a consumer, the one released last at the end.
    private(set) var spares: [UInt16] = []

    func generation(of channel: UInt16) -> UInt64? { generations[channel] }

    /// Whether a delivery's channel is still open in the generation that delivered it.
    func isCurrent(_ tag: AMQPDeliveryTag) -> Bool { generations[tag.channel] == tag.generation }

    /// The broker confirmed `channel.open`: a new generation begins.
    @discardableResult
    mutating func opened(_ channel: UInt16) -> UInt64 {
        defer { nextGeneration += 1 }
        generations[channel] = nextGeneration
        return nextGeneration
    }

    /// The channel closed (by us or the broker): its generation's tags are stale from now on.
    /// A spare one's number is freed (nobody else would free it).
    mutating func closed(_ channel: UInt16) {
        generations[channel] = nil
        if let index = spares.firstIndex(of: channel) {
            spares.remove(at: index)
            releaseConsumerChannel(channel)
        }
    }

    /// A consumer channel, still open, whose consumer is gone and whose deliveries are all
    /// settled: the next consumer takes it (`takeSpare`).
    mutating func spare(_ channel: UInt16) {
        guard channel >= Self.firstConsumer, generations[channel] != nil, !spares.contains(channel) else { return }
        spares.append(channel)
    }

    /// An open spare channel for a new consumer (the one released last: its frames are the
    /// newest, and a channel the broker closed meanwhile is no longer a spare), or nil.
    mutating func takeSpare() -> UInt16? {
        while let channel = spares.popLast() {
            if generations[channel] != nil { return channel }
        }
        return nil
    }

    /// A number for a new consumer's channel: a freed one first, the one freed longest ago, so
    /// a number closed a moment ago (a re-consume's old channel) is the last to be reused.
    mutating func allocateConsumerChannel() -> UInt16 {
        if !freeConsumerChannels.isEmpty { return freeConsumerChannels.removeFirst() }
        defer { nextConsumerChannel += 1 }
        return nextConsumerChannel
    }

    /// A consumer's channel number may be used again once the frames read so far are handled
    /// (ignored for the fixed channels: control, publish and get).
    mutating func releaseConsumerChannel(_ channel: UInt16) {
        guard channel >= Self.firstConsumer, !freeConsumerChannels.contains(channel), !closedUntilDrained.contains(channel) else { return }
        closedUntilDrained.append(channel)
    }

    /// Every frame read from the socket so far has been handled (the read loop found none
    /// waiting, `amqp_frames_enqueued` is 0): the numbers closed before may be given again.
    mutating func frameQueueDrained() {
        guard !closedUntilDrained.isEmpty else { return }
        freeConsumerChannels += closedUntilDrained
        closedUntilDrained.removeAll()
    }

    /// The connection died: every generation ends.
    mutating func connectionLost() {
        generations.removeAll()
        spares.removeAll()
    }

    /// A new connection numbers its consumer channels from the first again; generations go on.
    mutating func newConnection() {
        nextConsumerChannel = Self.firstConsumer
        freeConsumerChannels.removeAll()
        closedUntilDrained.removeAll()
        spares.removeAll()
    }
}
