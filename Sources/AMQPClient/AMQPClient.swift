/// AMQPClient: the worker's only link to RabbitMQ, built on librabbitmq. One thread owns each
/// connection and keeps polling it; async callers receive deliveries as an AsyncSequence and hand
/// acks, nacks and confirmed publishes back to that thread.
public enum AMQPClientModule {}
