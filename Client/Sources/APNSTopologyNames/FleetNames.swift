/// The broker names of the fleet (contract §5): the transient fanout exchange every instance
/// announces itself on, each admin server's own exclusive queue bound to it, and the durable
/// markers that keep a bundle paused across restarts. Names only, no IO.
extension TopologyNames {
    /// Heartbeats and pause/resume control messages; transient (not durable), fanout.
    public static let fleetExchange = "apns.fleet"

    /// The exclusive, auto-deleted queue on which one instance hears the fleet.
    public static func fleetQueue(instanceID: String) -> String { "apns.fleet.instance.\(instanceID)" }

    /// A durable, empty queue whose existence means "this bundle is paused fleet-wide". A queue
    /// is the one durable thing every AMQP client can create, delete and test for atomically
    /// (passive declare), so pausing needs no read-modify-write of a shared record.
    public static func pauseMarker(_ bundleID: String) -> String { "apns.fleet.paused.\(bundleID)" }
}
