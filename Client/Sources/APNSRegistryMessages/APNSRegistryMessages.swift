/// APNSRegistryMessages: what the sync server publishes to the device registry (contract §6),
/// parsed and validated with no IO: registration changes (`RegistrationMessage`) and group jobs
/// (`GroupJob`, with the section-2 job each device gets and its UUIDv5 id). Apart from
/// `APNSRegistry` so that the fuzz targets and the sync server's client need no PostgreSQL client.
public enum APNSRegistryMessagesModule {}
