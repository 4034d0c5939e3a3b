import APNSModel

/// What the fleet view's data costs in memory, estimated from above from the layout of Swift's
/// strings and dictionaries, so that `FleetView` and `FleetRates` can keep contract §5's bound
/// ("at most 16 MiB in all") by counting bytes, not only instances and bundles: 1,000 instances
/// of 1,000 bundles with 255-byte keys are within those counts and over 255 MB.
public enum FleetMemory {
    /// What malloc adds to every block (its header and rounding to 16 bytes).
    static let mallocOverhead = 16

    /// The heap storage of a string: none up to 15 UTF-8 bytes (held inline in the 16 bytes its
    /// container already counts), else the storage object's 32-byte header, the bytes and a
    /// terminating NUL, rounded up to 16, plus malloc's own.
    public static func string(_ text: String) -> Int {
        let count = text.utf8.count
        guard count > 15 else { return 0 }
        return (32 + count + 1 + 15) / 16 * 16 + mallocOverhead
    }

    /// The heap storage of a native dictionary of `count` entries: a header, then as many slots
    /// for keys and values as its bucket count (a power of two kept at most 3/4 full, so up to
    /// 8/3 slots per entry right after it grew) and one metadata bit per bucket. The keys' and
    /// values' own heap storage is not included.
    public static func dictionary<Key, Value>(count: Int, _: Key.Type, _: Value.Type) -> Int {
        guard count > 0 else { return 0 }
        var buckets = 2
        while buckets * 3 / 4 < count { buckets *= 2 }
        let slots = buckets * (MemoryLayout<Key>.stride + MemoryLayout<Value>.stride)
        return 80 + slots + (buckets + 63) / 64 * 8 + mallocOverhead
    }

    /// One bundle of a kept heartbeat beyond its slot in the instance's dictionary: its key's
    /// storage and its connection states.
    static func bundle(key: String, _ bundle: FleetInstance.Bundle) -> Int {
        string(key)
            + dictionary(count: bundle.connections.count, String.self, Int.self)
            + bundle.connections.keys.reduce(0) { $0 + string($1) }
    }

    /// A rates baseline or bucket slot of one bundle: the inner dictionary of the four ends.
    static let endCounts = dictionary(count: JobEnd.fleetEnds.count, JobEnd.self, Int.self)

    /// An instance as a `FleetView` keeps it, apart from its bundles: its slots in the view's
    /// dictionaries (instances and their costs) and the rates' baselines, and its text fields.
    static func instance(_ instance: FleetInstance) -> Int {
        // Slots of the view's two dictionaries and the rates' baselines, at their worst load
        // (8/3 slots per entry).
        let slots = (MemoryLayout<String>.stride * 3 + MemoryLayout<FleetInstance>.stride + MemoryLayout<Int>.stride
            + MemoryLayout<[String: [JobEnd: Int]]>.stride) * 8 / 3
        return slots + string(instance.id) + string(instance.host) + string(instance.version) + string(instance.broker)
    }

    /// Instance `instance` with `count` bundles costing `bundleBytes` in all (`bundle(key:_:)`):
    /// the instance, its bundles dictionary, its rates baseline (one entry per bundle holding
    /// the four ends; the keys share the bundles' storage) and the bundles' own cost.
    static func instance(_ instance: FleetInstance, bundles count: Int, bundleBytes: Int) -> Int {
        self.instance(instance)
            + dictionary(count: count, String.self, FleetInstance.Bundle.self)
            + dictionary(count: count, String.self, [JobEnd: Int].self) + count * endCounts
            + bundleBytes
    }
}
