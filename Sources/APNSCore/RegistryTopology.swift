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

extension TopologyPlan {
    /// Adds §6's exchanges, queues and bindings (the two work queues of the configured type).
    public mutating func addRegistry(queueType: QueueType) {
        let type: [String: TopologyArgument] = ["x-queue-type": .string(queueType.rawValue)]
        for name in [TopologyNames.registry, TopologyNames.groups] {
            exchanges.append(ExchangeDeclaration(name: name, kind: .fanout))
            queues.append(QueueDeclaration(name: name, arguments: type))
            bindings.append(BindingDeclaration(queue: name, exchange: name, routingKey: ""))
        }
        queues.append(QueueDeclaration(name: TopologyNames.registryDead, arguments: type))
        queues.append(QueueDeclaration(name: TopologyNames.groupsDead, arguments: type))
    }
}
