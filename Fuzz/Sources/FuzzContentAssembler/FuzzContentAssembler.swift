// libFuzzer target: frame sequences through AMQPClient's content assembler, as a broker (or
// anyone between it and us) could send them on four channels: deliveries begun with a body
// limit, content headers with any body size (up to UInt64.max), body frames, channel closes,
// in any order. Each finished message is checked against a model of the rules: a body over
// its limit keeps no byte and no capacity, a body within it is exactly the bytes sent up to
// its announced size, no message finishes early or twice, and memory never follows a size
// from the wire (libFuzzer's -rss_limit_mb catches a reservation that does).
import AMQPClient
import FuzzDriver

@_cdecl("FuzzContentAssembler_main")
public func fuzzContentAssemblerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzContentAssembler(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzContentAssembler(data, size)
    }
}

/// The model of one channel's message in progress.
private struct Pending {
    var tag: UInt64
    var limit: Int
    var size: UInt64 = 0
    var oversized = false
    var received: UInt64 = 0
    var kept: [UInt8] = []
    /// The largest reservation a header within the limit allowed (a second header does not
    /// shrink storage already reserved).
    var reserved = 0
    /// The most bytes kept at any time: storage grown for bytes that came stays when a second
    /// header cuts the body shorter.
    var peak = 0
}

private struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    var offset = 0
    var atEnd: Bool { offset >= bytes.count }
    mutating func byte() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }
    mutating func uint64(_ count: Int) -> UInt64 {
        var value: UInt64 = 0
        for _ in 0..<count { value = value << 8 | UInt64(byte()) }
        return value
    }
}

private let limits = [0, 1, 7, 64, 4096, 64 * 1024, Int.max]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzContentAssembler(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var reader = Reader(bytes: UnsafeBufferPointer(start: data, count: size))
    var assembler = AMQPContentAssemblerProbe()
    var model: [UInt16: Pending] = [:]
    var nextTag: UInt64 = 0
    var filler: UInt8 = 0
    while !reader.atEnd {
        let op = reader.byte()
        let channel = UInt16(op >> 2 & 3) + 1
        var finished: AMQPContentAssemblerProbe.Finished?
        var expected: Pending?
        switch op & 3 {
        case 0:
            nextTag += 1
            let limit = limits[Int(reader.byte()) % limits.count]
            assembler.begin(tag: nextTag, bodyLimit: limit, on: channel)
            model[channel] = Pending(tag: nextTag, limit: limit)
        case 1:
            // Small sizes most of the time, any UInt64 now and then.
            let mode = reader.byte()
            let bodySize: UInt64 = switch mode % 4 {
            case 0: UInt64(reader.byte())
            case 1: reader.uint64(2)
            case 2: reader.uint64(3)
            default: reader.uint64(8)
            }
            finished = assembler.header(on: channel, bodySize: bodySize)
            if var pending = model[channel] {
                pending.size = bodySize
                pending.oversized = bodySize > UInt64(pending.limit)
                if pending.oversized {
                    pending.kept = []
                } else {
                    pending.kept = Array(pending.kept.prefix(Int(bodySize)))
                    pending.reserved = max(pending.reserved, min(Int(bodySize), AMQPContentAssemblerProbe.maximumReservation))
                }
                if bodySize == 0 {
                    expected = pending
                    model[channel] = nil
                } else {
                    model[channel] = pending
                }
            }
        case 2:
            let length = Int(reader.uint64(2)) % 8193
            var fragment = [UInt8](repeating: 0, count: length)
            for index in fragment.indices {
                filler &+= 1
                fragment[index] = filler
            }
            finished = assembler.body(on: channel, fragment)
            if var pending = model[channel] {
                pending.received += UInt64(length)
                if !pending.oversized {
                    pending.kept += fragment.prefix(Int(pending.size) - pending.kept.count)
                    pending.peak = max(pending.peak, pending.kept.count)
                }
                if pending.received >= pending.size {
                    expected = pending
                    model[channel] = nil
                } else {
                    model[channel] = pending
                }
            }
        default:
            assembler.discard(channel: channel)
            model[channel] = nil
        }
        check(finished, expected)
        for channel in UInt16(1)...4 where assembler.isAssembling(on: channel) != (model[channel] != nil) {
            fatalError("channel \(channel): the assembler and the model disagree on a message in progress")
        }
    }
    return 0
}

private func check(_ finished: AMQPContentAssemblerProbe.Finished?, _ expected: Pending?) {
    switch (finished, expected) {
    case (nil, nil):
        return
    case (let finished?, nil):
        fatalError("a message finished that the model does not finish: tag \(finished.tag)")
    case (nil, let expected?):
        fatalError("a message did not finish: tag \(expected.tag), size \(expected.size), received \(expected.received)")
    case (let finished?, let expected?):
        guard finished.tag == expected.tag, finished.bodySize == expected.size, finished.oversized == expected.oversized else {
            fatalError("finished \(finished.tag)/\(finished.bodySize)/\(finished.oversized), expected \(expected.tag)/\(expected.size)/\(expected.oversized)")
        }
        if finished.oversized {
            guard finished.body.isEmpty, finished.bodyCapacity == 0 else {
                fatalError("an oversized body kept \(finished.body.count) bytes, capacity \(finished.bodyCapacity)")
            }
        } else {
            guard finished.body == expected.kept else { fatalError("a body within its limit changed on the way") }
            guard finished.body.count <= expected.limit else { fatalError("a body beyond its limit was kept") }
            // Reserved at most min(size, 1 MiB) up front; growth beyond follows bytes that came
            // (also those a second, shorter header cut off again).
            let allowed = max(expected.reserved, expected.peak, finished.body.count) * 2 + 64
            guard finished.bodyCapacity <= allowed else {
                fatalError("capacity \(finished.bodyCapacity) for a body of \(finished.body.count) announced as \(expected.size)")
            }
        }
    }
}
