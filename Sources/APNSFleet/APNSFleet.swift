/// APNSFleet: the fleet of contract §5 as values, with no IO: what instances tell each other
/// (`FleetMessage`), what one listener knows of them (`FleetView`), the jobs-per-second history of
/// the graph (`FleetRates`, `FleetGraphScale`) and the memory bound of it all (`FleetMemory`).
/// Time comes in as `Date`; `FleetService` (APNSWorker) and the admin page drive it.
public enum APNSFleetModule {}
