/// AMQPClient: the worker's only link to RabbitMQ, built on librabbitmq 0.11.
///
/// librabbitmq is not thread-safe and services heartbeats only inside its own calls, so one
/// dedicated thread owns each connection (`ConnectionDriver`): it sleeps in poll(2) on the socket
/// and an eventfd, reads frames, and carries out commands that async callers queue under a
/// `Mutex` (publish, ack, declare, consume…), resuming their continuations with the result. No
/// Swift task ever blocks on a socket. Entry point: `AMQPConnection.connect(configuration:logger:)`.
public enum AMQPClientModule {}
