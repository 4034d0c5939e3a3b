import Synchronization

/// A one-way flag shared between a loop and the tasks it spawned (`FleetService`'s heartbeat).
final class StopSignal: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}
