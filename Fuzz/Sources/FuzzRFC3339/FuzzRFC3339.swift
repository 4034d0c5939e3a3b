// libFuzzer target: the fleet's dates (`RFC3339`, read from every heartbeat on `apns.fleet`) and
// the admin server's `Date` header (`HTTPDate`), against Foundation's ISO 8601 style as the
// oracle (ICU's calendar, which the worker no longer loads for them). The input is read twice:
// as text, which `RFC3339` may accept only if Foundation's `.iso8601` decoder accepts it too, at
// the same moment (from 1583 on: Foundation's calendar is Julian before 1582-10-15), and which it
// must accept when it is exactly what Foundation writes; and its first 8 bytes as a moment (a
// `Double`'s bits, any of them, and a second from 1583 to 9999), which both formats must write
// without trapping, readably, and (for the second) as Foundation does.
import APNSModel
import Foundation
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzRFC3339_main")
public func fuzzRFC3339Main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzRFC3339(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzRFC3339(data, size)
    }
}

/// 1583-01-01T00:00:00Z and 9999-12-31T23:59:59Z: where Foundation's calendar and ours agree.
let gregorianFrom: Int64 = -12_212_553_600
let lastWritable = UTCDateTime.writable.upperBound
/// 0000-01-01T00:00:00Z: a text of year 0000 with a positive offset reads as a moment before it,
/// which is written as this earliest one, as one past 9999 as the last.
let firstWritable = UTCDateTime.writable.lowerBound

/// RFC 9110's IMF-fixdate by Foundation's formatter (one thread: libFuzzer calls in turn).
let imfFixdate: DateFormatter = {
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(identifier: "GMT")
    formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
    return formatter
}()

/// The moment's whole seconds since 1970, rounded down.
func wholeSeconds(_ date: Date) -> Double {
    date.timeIntervalSinceReferenceDate.rounded(.down) + 978_307_200
}

/// RFC 3339 (§5.6) allows `t` and `z`, which Foundation's style refuses: the oracle reads them
/// upper-case.
func upperCasingTAndZ(_ text: String) -> String {
    var bytes = Array(text.utf8)
    if bytes.count > 10, bytes[10] == UInt8(ascii: "t") { bytes[10] = UInt8(ascii: "T") }
    if bytes.last == UInt8(ascii: "z") { bytes[bytes.count - 1] = UInt8(ascii: "Z") }
    return String(decoding: bytes, as: UTF8.self)
}

func checkText(_ text: String) {
    if let date = RFC3339.date(from: text) {
        guard let foundations = try? Date(upperCasingTAndZ(text), strategy: .iso8601) else { fatalError("read \(text), which Foundation refuses") }
        let seconds = wholeSeconds(date)
        if seconds >= Double(gregorianFrom), abs(date.timeIntervalSince(foundations)) > 1e-6 {
            fatalError("\(text): \(date.timeIntervalSince1970), Foundation \(foundations.timeIntervalSince1970)")
        }
        if (Double(firstWritable)...Double(lastWritable)).contains(seconds),
            RFC3339.date(from: RFC3339.string(from: date))?.timeIntervalSince1970 != seconds
        {
            fatalError("\(text) written as \(RFC3339.string(from: date)) does not read back")
        }
    } else if text.utf8.count == 20, let foundations = try? Date(text, strategy: .iso8601),
        (Double(gregorianFrom)...Double(lastWritable)).contains(foundations.timeIntervalSince1970),
        Date.ISO8601FormatStyle().format(foundations) == text
    {
        fatalError("refused \(text), which Foundation writes")
    }
}

func checkMoment(_ date: Date, comparing: Bool) {
    let text = RFC3339.string(from: date)
    guard text.utf8.count == 20, let read = RFC3339.date(from: text) else { fatalError("wrote \(text), which it cannot read") }
    if comparing {
        let foundations = Date.ISO8601FormatStyle().format(date)
        guard text == foundations else { fatalError("\(date.timeIntervalSince1970): \(text), Foundation \(foundations)") }
        guard read.timeIntervalSince1970 == wholeSeconds(date) else { fatalError("\(text) read as \(read.timeIntervalSince1970)") }
        let header = HTTPDate.string(from: date)
        // The formatter rounds to its millisecond first; the header's second is the one the moment is in.
        let second = Date(timeIntervalSince1970: wholeSeconds(date))
        guard header == imfFixdate.string(from: second) else { fatalError("header \(header), Foundation \(imfFixdate.string(from: second))") }
    }
    let header = HTTPDate.string(from: date)
    guard header.utf8.count == 29, header.hasSuffix(" GMT"), header.dropFirst(5).prefix(11).hasSuffix(text.prefix(4)) else {
        fatalError("\(date.timeIntervalSince1970): header \(header), RFC 3339 \(text)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRFC3339(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    checkText(String(decoding: bytes, as: UTF8.self))
    guard size >= 8 else { return 0 }
    let bits = bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
    checkMoment(Date(timeIntervalSince1970: Double(bitPattern: bits)), comparing: false)
    // The same bits as a second from 1583 to 9999, and a fraction from the ninth byte.
    let second = gregorianFrom + Int64(bits % UInt64(lastWritable - gregorianFrom + 1))
    let fraction = size > 8 ? Double(bytes[8]) / 256 : 0
    checkMoment(Date(timeIntervalSince1970: Double(second) + fraction), comparing: true)
    return 0
}
