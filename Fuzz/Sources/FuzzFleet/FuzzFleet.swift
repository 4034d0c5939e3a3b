// libFuzzer target: fleet messages (contract §5) decoded AND applied, as a listener does. The
// input is a sequence of records, each `op` (1 byte), `length` (2 bytes, little endian) and
// `length` bytes: op bits 0-1 = what to do with the bytes (decode them as a fleet message and
// apply a heartbeat; or read them as raw counts for FleetRates; or as the counts of the last
// heartbeat seen, applied to the view unchecked by the decoder), bits 2-7 = seconds the clock
// moves first. Whatever the sequence, nothing traps, the view stays within its bounds (count
// and bytes), and the graph's axis and labels drawn from the rates (`FleetGraphScale`, what
// `/fleet/graph` shows) stay numbers: forged heartbeats once trapped there, summing bundles.
import APNSFleet
import APNSModel
import Foundation
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzFleet_main")
public func fuzzFleetMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzFleet(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzFleet(data, size)
    }
}

/// Eight bytes, little endian, as any Int (the numeric edges come up quickly).
func integers(_ bytes: ArraySlice<UInt8>) -> [Int] {
    stride(from: bytes.startIndex, to: bytes.endIndex - 7, by: 8).map { start in
        bytes[start..<start + 8].reversed().reduce(0) { ($0 << 8) | Int($1) }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFleet(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    var view = FleetView()
    var rates = FleetRates(bucketSeconds: 10, windowSeconds: 60)
    var now = Date(timeIntervalSince1970: 1_800_000_000)
    var last: FleetInstance? = nil
    var at = 0
    while at + 3 <= input.count {
        let op = input[at]
        let length = Int(input[at + 1]) | Int(input[at + 2]) << 8
        let bytes = input[(at + 3)..<min(at + 3 + length, input.count)]
        at += 3 + length
        now = now.addingTimeInterval(Double(op >> 2))
        switch op & 3 {
        case 0:
            let message = FleetMessage.decode(Array(bytes))
            if case .heartbeat(let instance) = message {
                guard instance.isWellFormed, view.received(instance, at: now) != .ignored else { fatalError("a decoded heartbeat was not well formed") }
                last = instance
            } else if message == nil {
                view.ignoredMessage()
            }
        case 1:
            let counts = integers(bytes)
            for (index, count) in counts.enumerated() {
                // Seven bundles: enough slots of `Int.max` in one bucket to pass `Int` once summed.
                rates.record(instance: "i\(index % 3)", counts: ["b\(index % 7)": [JobEnd.fleetEnds[index % 4]: count]], at: now)
            }
        default:
            guard var instance = last else { break }
            let counts = integers(bytes)
            for (index, (key, _)) in instance.bundles.enumerated() where index < counts.count {
                instance.bundles[key]?.delivered = counts[index]
                instance.bundles[key]?.inFlight = counts[counts.count - 1 - index]
            }
            if op & 3 == 3, let first = counts.first { instance.id = "forged-\(first)" }
            let admission = view.received(instance, at: now)
            if admission != .ignored, !instance.isWellFormed { fatalError("the view kept a heartbeat that is not well formed") }
        }
        view.expire(now: now)
        let live = view.live(now: now)
        guard live.count <= FleetView.maxInstances, live.allSatisfy({ $0.bundles.count <= FleetView.maxBundlesPerInstance }) else {
            fatalError("the view outgrew its bounds")
        }
        guard view.bytes <= FleetView.maxBytes, view.rates.bytes <= FleetRates.maxBytes, rates.bytes <= FleetRates.maxBytes else {
            fatalError("the view outgrew its bytes")
        }
        _ = view.totals(now: now)
        _ = view.rates.recent(now: now)
        _ = rates.recent(now: now, seconds: 60)
        for series in [view.rates.series(now: now), rates.series(now: now), rates.series(now: now, bundleID: "b1")] {
            draw(series)
        }
    }
    return 0
}

/// What `/fleet/graph` computes of a series: every rate within its cap, the axis's top and
/// ticks, and every label (an `Int` conversion each).
func draw(_ series: [FleetRates.Point]) {
    for point in series {
        for rate in point.perSecond.values {
            guard rate.isFinite, rate >= 0, rate <= FleetRates.maxPerSecond else { fatalError("a rate beyond its cap: \(rate)") }
            _ = FleetGraphScale.label(rate)
        }
    }
    let top = FleetGraphScale.top(series)
    guard top.isFinite, top >= 1, top <= 1e16 else { fatalError("an axis top out of range: \(top)") }
    for tick in FleetGraphScale.ticks(top: top) { _ = FleetGraphScale.label(tick) }
}
