/// APNSModel: the job model and the APNs protocol as values, with no IO.
///
/// The job contract (`JobParser` turns what the sync server publishes into a `Job` or a precise
/// `JobError`), the notification a transport sends (`PushNotification`, `PushTarget`), the HTTP/2
/// provider API as request and answer values (`HTTP2Request`, `HTTPAnswer`, `APNSReason`), what a
/// transport learned about a send (`TransportResult`) and the `NotificationTransport` seam, the
/// retry schedule, the ends a job reaches (`JobEnd`), and the shape rules for untrusted text.
/// Nothing here opens a socket or reads a clock, so all of it is tested without a network.
///
/// The other pure modules sit on this one, each for one domain: `APNSJSON` below it (the reader
/// of job bodies), and above it `APNSBinaryProtocol`, `APNSOutcome`, `APNSProviderToken`,
/// `APNSChannelManagement`, `APNSRegistryMessages`, `APNSFleet`, `APNSTopologyNames` and
/// `APNSAdminQuery` (docs/architecture.md, "Modules").
public enum APNSModelModule {}
