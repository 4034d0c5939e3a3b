import Foundation

/// A moment's calendar fields in UTC (proleptic Gregorian calendar) and back: what the
/// hand-made date formats (`RFC3339`, `HTTPDate`) write and read. Not Foundation's `Calendar`:
/// on Linux its Gregorian calendar and `TimeZone` are ICU's once FoundationInternationalization
/// is loaded, and the first use faults ICU's code and time-zone data into the process, 2–3 MiB of
/// the worker's peak resident memory (docs/benchmarks.md, "The ICU pair taken out"). Days to
/// dates and back after H. Hinnant's `days_from_civil` and `civil_from_days` (eras of 400 years).
public struct UTCDateTime: Sendable, Hashable {
    public var year: Int
    /// 1...12
    public var month: Int
    /// 1...31
    public var day: Int
    public var hour: Int
    public var minute: Int
    public var second: Int

    /// The Unix seconds the formats write: 0000-01-01T00:00:00Z through 9999-12-31T23:59:59Z
    /// (four-digit years). A moment outside is written as the nearest end.
    public static let writable: ClosedRange<Int64> = -62_167_219_200...253_402_300_799

    /// Seconds from 1970 to Foundation's reference date (2001-01-01T00:00:00Z).
    static let referenceDateUnixSeconds: Int64 = 978_307_200

    public init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
    }

    /// The fields of `unixSeconds`, clamped to `writable`.
    public init(unixSeconds: Int64) {
        let seconds = min(max(unixSeconds, Self.writable.lowerBound), Self.writable.upperBound)
        let (days, secondOfDay) = Self.floorDivision(seconds, 86_400)
        (year, month, day) = Self.civil(fromDays: Int(days))
        hour = Int(secondOfDay / 3600)
        minute = Int(secondOfDay % 3600 / 60)
        second = Int(secondOfDay % 60)
    }

    /// The whole second `date` falls in (rounded down, as Foundation's ISO 8601 style did:
    /// 0.999 s after midnight is midnight, 0.5 s before it is 23:59:59), clamped to `writable`;
    /// a date that is not a number reads as the earliest.
    public init(_ date: Date) {
        self.init(unixSeconds: Self.unixSeconds(date))
    }

    /// `date`'s whole seconds since 1970, rounded down and clamped to `writable`. Rounded from the
    /// reference date, which `Date` stores: adding 1970's offset first could round x.9999999 up.
    static func unixSeconds(_ date: Date) -> Int64 {
        let sinceReference = date.timeIntervalSinceReferenceDate.rounded(.down)
        let lower = Double(writable.lowerBound - referenceDateUnixSeconds)
        let upper = Double(writable.upperBound - referenceDateUnixSeconds)
        guard !sinceReference.isNaN, sinceReference > lower else { return writable.lowerBound }
        guard sinceReference < upper else { return writable.upperBound }
        return Int64(sinceReference) + referenceDateUnixSeconds
    }

    /// Seconds since 1970 (no bound: any fields, e.g. a second of 60, count on).
    public var unixSeconds: Int64 {
        Int64(Self.days(year: year, month: month, day: day)) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }

    /// 0 = Sunday … 6 = Saturday (1970-01-01 was a Thursday).
    public var weekday: Int {
        Int(Self.floorDivision(Int64(Self.days(year: year, month: month, day: day)) + 4, 7).remainder)
    }

    public static func isLeapYear(_ year: Int) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    /// Days in `month` (1...12) of `year`; 0 for a month that does not exist.
    public static func days(inMonth month: Int, of year: Int) -> Int {
        switch month {
        case 1, 3, 5, 7, 8, 10, 12: 31
        case 4, 6, 9, 11: 30
        case 2: isLeapYear(year) ? 29 : 28
        default: 0
        }
    }

    /// Days from 1970-01-01 to the date (negative before it); `month` 1...12.
    static func days(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date `days` after 1970-01-01.
    static func civil(fromDays days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// Quotient rounded down and a remainder in 0..<divisor (`divisor` > 0).
    static func floorDivision(_ value: Int64, _ divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let quotient = value / divisor - (value % divisor < 0 ? 1 : 0)
        return (quotient, value - quotient * divisor)
    }
}

/// Writes ASCII into a string's storage as `String(unsafeUninitializedCapacity:)` hands it out:
/// the date formats' one allocation each.
struct ASCIIWriter {
    let out: UnsafeMutableBufferPointer<UInt8>
    private(set) var count = 0

    init(_ out: UnsafeMutableBufferPointer<UInt8>) { self.out = out }

    mutating func put(_ byte: UInt8) {
        out[count] = byte
        count += 1
    }

    mutating func put(_ text: StaticString) {
        text.withUTF8Buffer { for byte in $0 { put(byte) } }
    }

    /// `value`'s last `width` decimal digits, zero-padded (`value` ≥ 0).
    mutating func put(_ value: Int, width: Int) {
        var divisor = 1
        for _ in 1..<width { divisor *= 10 }
        while divisor > 0 {
            put(UInt8(ascii: "0") + UInt8(value / divisor % 10))
            divisor /= 10
        }
    }
}
