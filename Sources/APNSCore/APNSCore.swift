/// APNSCore: everything about APNs and jobs that needs no IO.
///
/// The job contract (parsing and validation of what the sync server publishes), the notification
/// a transport sends, the classified result of every send, the binary provider framing, the
/// HTTP/2 request mapping, JWT provider tokens, and the state machines (retry policy, binary
/// replay buffer, held-bundle breaker) that the IO modules drive. Nothing here opens a socket or
/// reads a clock directly, so all of it is tested without a network.
public enum APNSCoreModule {}
