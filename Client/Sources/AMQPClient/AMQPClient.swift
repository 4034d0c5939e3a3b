/// AMQPClient: the worker's only link to RabbitMQ, built on librabbitmq 0.11.
///
/// librabbitmq is not thread-safe and services heartbeats only inside its own calls, so one
/// dedicated thread owns each connection (`ConnectionDriver`): it sleeps in poll(2) on the socket
/// and an eventfd, reads frames, and carries out commands that async callers queue under a
/// `Mutex` (publish, ack, declare, consume…), resuming their continuations with the result. No
/// Swift task ever blocks on a socket. Entry point: `AMQPConnection.connect(configuration:logger:)`.
///
/// A general client: it knows nothing of APNs (the APNs topology is built above it, in
/// `APNSTopology`). What a consumer of jobs needs from it is the `MessageBroker` protocol, so
/// such code is tested against a fake broker; the owner thread's decisions (`ReconnectPolicy`,
/// `ChannelTable`, `PublishConfirms`, `AckCoalescer`) are values tested without one.
public enum AMQPClientModule {}
