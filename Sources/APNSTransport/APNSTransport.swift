/// APNSTransport: the connections to APNs. The HTTP/2 provider API is the production transport;
/// the legacy binary provider API is kept as a second one. Both implement `NotificationTransport`.
public enum APNSTransportModule {}
