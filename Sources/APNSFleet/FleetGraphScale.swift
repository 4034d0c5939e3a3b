/// The y axis of the fleet graph (`FleetGraph` in APNSAdmin), from rates built of heartbeats:
/// its top, its ticks and the labels of ticks and lines. Total: any rate, finite or not, gives
/// numbers an `Int` holds (a label's `Int(_:)` trapped on forged heartbeats). Here in
/// APNSFleet so the heartbeat fuzz target (Fuzz/FuzzFleet) draws what it decodes.
import Foundation

public enum FleetGraphScale {
    /// A rate as drawn: 0 when not a number or negative, at most `FleetRates.maxPerSecond`.
    public static func bounded(_ rate: Double) -> Double {
        guard !rate.isNaN else { return 0 }
        return min(max(rate, 0), FleetRates.maxPerSecond)
    }

    /// The axis's top: the highest rate rounded up to 1, 2 or 5 × a power of ten (at least 1
    /// job/s, at most 10^16, the round number above `FleetRates.maxPerSecond`).
    public static func top(_ points: [FleetRates.Point]) -> Double {
        let highest = points.flatMap(\.perSecond.values).map(bounded).max() ?? 0
        return niceCeiling(max(highest, 1))
    }

    /// `value` (at least 1) rounded up to 1, 2 or 5 × a power of ten.
    public static func niceCeiling(_ value: Double) -> Double {
        let magnitude = pow(10, floor(log10(value)))
        for step in [1.0, 2.0, 5.0, 10.0] where step * magnitude >= value - 1e-9 { return step * magnitude }
        return 10 * magnitude
    }

    /// Grid values from 0 to `top`, at round steps: a top of 1, 2 or 5 (× 10ⁿ) is cut in 5, 4
    /// or 5 parts (steps of 0.2, 0.5 or 1 × 10ⁿ).
    public static func ticks(top: Double) -> [Double] {
        let leading = (top / pow(10, floor(log10(top)))).rounded()
        let parts = leading == 2 ? 4 : 5
        return (0...parts).map { top * Double($0) / Double(parts) }
    }

    /// `0/s`, `2.5/s`, `120/s`. Whole numbers go through `Int`, so the value is bounded first,
    /// above the cap rather than at it: the axis's top (10^16) keeps its own label.
    public static func label(_ value: Double) -> String {
        let value = value.isNaN ? 0 : min(max(value, 0), 1e18)
        return value >= 10 || value == value.rounded() ? "\(Int(value.rounded()))/s" : String(format: "%.1f/s", value)
    }
}
