import APNSModel
import Logging

/// Writing a flush's counts. One count whose row PostgreSQL refuses would fail its batch at
/// every flush for ever and hold every other count back with it: a bundle ID of about 2.7 KB
/// makes its row larger than the primary key's index allows (SQLSTATE 54000). §6 bounds a
/// registered bundle ID to 155 bytes, so such an ID comes from a device written by
/// `importDevices` or by hand, counted when a group job's notification merges into its sync
/// window. Counts are statistics, and PostgreSQL writes a batch all or nothing: a refused batch
/// is halved until each refused key is alone, those keys are dropped with one error line, and the
/// rest are written. Any other error is the registry being unavailable: what is not written yet
/// is kept for the next flush.
extension RegistryRecorder {
    /// Writes `counts`; returns what to keep for the next flush.
    func writeCounts(_ counts: [CountAggregator.Key: Int64]) async -> [CountAggregator.Key: Int64] {
        var untried = [counts]
        var dropped: [CountAggregator.Key: Int64] = [:]
        var refusal = ""
        defer { if !dropped.isEmpty { logDropped(dropped, refusal: refusal) } }
        while let batch = untried.popLast() {
            do {
                try await store.addCounts(batch)
            } catch {
                guard let refused = RegistryStore.refusedValue(error) else {
                    logger.debug("counts kept for the next flush", metadata: ["error": "\(error)"])
                    return untried.reduce(into: batch) { kept, more in kept.merge(more) { a, _ in a } }
                }
                guard batch.count > 1 else {
                    dropped.merge(batch) { a, _ in a }
                    refusal = refused
                    continue
                }
                let keys = batch.keys.sorted()
                let half = keys.count / 2
                for part in [keys[half...], keys[..<half]] {
                    untried.append(Dictionary(uniqueKeysWithValues: part.map { ($0, batch[$0]!) }))
                }
            }
        }
        return [:]
    }

    private func logDropped(_ dropped: [CountAggregator.Key: Int64], refusal: String) {
        // A bundle ID that long is no name to print whole: its start and its length tell it.
        let bundles = Set(dropped.keys.map(\.bundleID)).sorted().prefix(3).map { bundle in
            "\(String(bundle.prefix(64)).debugDescription) (\(bundle.utf8.count) bytes)"
        }
        logger.error(
            "counts dropped: PostgreSQL refused their rows",
            metadata: [
                "registry.dropped_count_keys": "\(dropped.count)", "registry.dropped_counts": "\(dropped.values.reduce(0, &+))",
                "apns.bundles": "\(bundles.joined(separator: ", "))", "error": "\(refusal)",
            ])
    }
}
