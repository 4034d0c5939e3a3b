/// Events in the last minute as a sliding window of one-second buckets, for the per-minute rates
/// on the admin page. Pure: time comes in as whole seconds from any fixed origin, so tests drive it.
public struct MinuteRate: Sendable, Hashable {
    /// The window's length in seconds.
    public static let windowSeconds = 60

    /// Bucket `i` holds the events of the second `seconds[i]`; a bucket whose second has left
    /// the window is stale and reset before it is reused.
    private var seconds = [Int64](repeating: .min, count: windowSeconds)
    private var counts = [Int](repeating: 0, count: windowSeconds)

    public init() {}

    /// Counts `events` at `second`. Events older than the window are dropped.
    public mutating func record(atSecond second: Int64, events: Int = 1) {
        let index = Self.bucket(of: second)
        if seconds[index] != second {
            // Older than what the bucket holds already: that second has left every window.
            if seconds[index] > second { return }
            seconds[index] = second
            counts[index] = 0
        }
        counts[index] += events
    }

    /// Events in the 60 seconds ending at `second` (the seconds `second-59 ... second`).
    public func perMinute(atSecond second: Int64) -> Int {
        var total = 0
        for index in 0..<Self.windowSeconds where seconds[index] <= second && seconds[index] > second - Int64(Self.windowSeconds) {
            total += counts[index]
        }
        return total
    }

    private static func bucket(of second: Int64) -> Int {
        let window = Int64(windowSeconds)
        return Int(((second % window) + window) % window)
    }
}
