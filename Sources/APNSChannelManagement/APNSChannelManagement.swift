/// APNSChannelManagement: Apple's channel management API for broadcast push (contract §7) as
/// values: the request of each operation and the reading of its answer, on the API's own host
/// and port. `APNSTransport`'s `ChannelManagementClient` only moves the bytes.
public enum APNSChannelManagementModule {}
