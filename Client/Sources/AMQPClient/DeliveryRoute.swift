/// Where a `basic.deliver` from the broker goes, decided from its consumer tag and its channel
/// alone (no IO; the driver carries it out in `handleMethod` and `deliver`). Only the broker can
/// put a tag in a delivery on our channel, but it delivers for tags we cancelled or replaced
/// (a quorum queue even after `basic.cancel-ok`), and a tag we never had must neither crash the
/// connection nor be worked, nor be left unsettled.
enum DeliveryRoute: Equatable, Sendable {
    /// To the channel's consumer, whose tag it carries: kept up to its body limit and worked.
    case consumer
    /// Back to the queue at once (`basic.reject`, requeue), its body not kept nor copied: a
    /// tag the channel's consumer replaced (`ConnectionDriver.retire`), the tag of a consumer
    /// cancelled, a tag this channel never had, or a channel without a consumer. Nobody here
    /// would settle it, and it would sit unacked until the connection closed.
    case requeue
    /// Nothing: its channel is closed (the frame was read before the close finished), and the
    /// broker requeued it with the close. A reject there would name a channel that is not open,
    /// a connection error.
    case drop

    /// `channelOpen`: the channel's generation is current. `consumer`: the tag of the consumer
    /// delivering on the channel now, and whether its caller cancelled it.
    static func of(consumerTag: String, channelOpen: Bool, consumer: (tag: String, cancelled: Bool)?) -> DeliveryRoute {
        guard channelOpen else { return .drop }
        guard let consumer, !consumer.cancelled, consumer.tag == consumerTag else { return .requeue }
        return .consumer
    }
}
