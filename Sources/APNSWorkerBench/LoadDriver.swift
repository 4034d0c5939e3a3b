/// What the benchmarks share: a closed-loop load driver for the transports, nearest-rank
/// percentiles, and durations as floating-point milliseconds.
import APNSModel
import Foundation

extension Duration {
    /// Milliseconds with their fraction, for latencies.
    var inMilliseconds: Double { timeInterval * 1000 }
}

/// Latencies in milliseconds, sorted once.
struct LatencySample: Sendable {
    let sorted: [Double]
    init(_ values: [Double]) { sorted = values.sorted() }
    var count: Int { sorted.count }

    /// Nearest rank: the smallest value with at least `p` of the sample at or below it; 0 when empty.
    func percentile(_ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        let rank = Int((Double(sorted.count) * p).rounded(.up))
        return sorted[min(sorted.count - 1, max(rank - 1, 0))]
    }
}

/// What one closed-loop run measured.
struct LoadRun: Sendable {
    var seconds: Double
    var latencies: LatencySample
    var notAccepted: Int
}

/// Sends `count` notifications with random 32-byte tokens to `bundle`, never more than
/// `concurrency` in flight; `send` reports whether APNs accepted one. Each latency runs from the
/// call to `send` to its result, any wait inside the transport included.
func runClosedLoop(
    count: Int, concurrency: Int, bundle: String, payload: [UInt8],
    send: @escaping @Sendable (PushNotification) async -> Bool
) async -> LoadRun {
    let started = ContinuousClock.now
    var latencies: [Double] = []
    latencies.reserveCapacity(count)
    var notAccepted = 0
    await withTaskGroup(of: (Double, Bool).self) { group in
        var launched = 0
        while launched < count {
            if launched >= concurrency, let (ms, accepted) = await group.next() {
                latencies.append(ms)
                if !accepted { notAccepted += 1 }
            }
            let notification = PushNotification(
                id: UUID(), token: DeviceToken(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) }), topic: bundle,
                pushType: .alert, priority: 10, expiration: nil, collapseID: nil, payload: payload, environment: .production)
            group.addTask {
                let sent = ContinuousClock.now
                let accepted = await send(notification)
                return (sent.duration(to: .now).inMilliseconds, accepted)
            }
            launched += 1
        }
        for await (ms, accepted) in group {
            latencies.append(ms)
            if !accepted { notAccepted += 1 }
        }
    }
    return LoadRun(seconds: started.duration(to: .now).timeInterval, latencies: LatencySample(latencies), notAccepted: notAccepted)
}
