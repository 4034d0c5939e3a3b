/// APNSTopologyNames: the one place for the broker's names: every exchange and queue of contract
/// §1 (jobs, retries, dead letters, feedback), §5 (the fleet) and §6 (registry and group jobs),
/// the queue type, and the headers the worker writes on a job (`JobHeaders`). Names only: the
/// declarations with their arguments are built in `APNSTopology`, which needs the configuration;
/// this module does not, so the sync server's client takes its names from here.
public enum APNSTopologyNamesModule {}
