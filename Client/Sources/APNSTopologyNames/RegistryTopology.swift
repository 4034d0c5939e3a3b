/// The broker names of contract §6 (device registry and group jobs), declared only when the
/// worker has a `[registry]` section.
extension TopologyNames {
    /// Registration changes from the sync server: fanout exchange and queue of the same name.
    public static let registry = "apns.registry"
    /// Group jobs from the sync server: fanout exchange and queue of the same name.
    public static let groups = "apns.groups"
    public static let registryDead = "apns.registry.dead"
    public static let groupsDead = "apns.groups.dead"
}
