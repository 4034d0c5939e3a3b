/// APNSBinaryProtocol: Apple's legacy binary provider API and feedback service on the wire, with
/// no IO: notification frames and error responses (`BinaryFraming`), the in-flight buffer and
/// replay that stand in for the confirmations that protocol never sends (`BinaryReplay`), and
/// the feedback service's tuples (`FeedbackTuple`). `APNSTransport` drives them over sockets;
/// `APNSSimulator` speaks the other side.
public enum APNSBinaryProtocolModule {}
