import Foundation

/// RFC 3339 timestamps as the fleet writes and reads them (contract §5, `FleetJSON`), by hand:
/// Foundation's ISO 8601 style goes through ICU's calendar on Linux (`UTCDateTime` says what that
/// costs). Written as `JSONEncoder`'s `.iso8601` wrote them, `2026-11-27T08:57:25Z`: whole
/// seconds rounded down, UTC. Read: `YYYY-MM-DDTHH:MM:SS`, an optional fraction of 1 to 9 digits,
/// then `Z` or `±HH:MM`, nothing before or after: what every instance writes, and RFC 3339's
/// `date-time` within what Foundation's `.iso8601` decoder also accepted (offsets up to 18 hours,
/// fractions to the nanosecond), and `T` and `Z` in either case as RFC 3339 allows. Stricter than that decoder, which let a
/// day past the month's end roll over, took `24:00:00`, `GMT+1` and text after the date.
/// Proleptic Gregorian throughout; Foundation's calendar switches to the Julian one before
/// 1582-10-15, so for earlier dates (which no instance sends) the two differ by some days.
public enum RFC3339 {
    /// The longest text read: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnn+HH:MM`.
    public static let maxBytes = 35

    /// `2026-11-27T08:57:25Z`; a date outside 0000–9999 is written as the nearest end.
    public static func string(from date: Date) -> String {
        let fields = UTCDateTime(date)
        return String(unsafeUninitializedCapacity: 20) { out in
            var text = ASCIIWriter(out)
            text.put(fields.year, width: 4)
            text.put("-")
            text.put(fields.month, width: 2)
            text.put("-")
            text.put(fields.day, width: 2)
            text.put("T")
            text.put(fields.hour, width: 2)
            text.put(":")
            text.put(fields.minute, width: 2)
            text.put(":")
            text.put(fields.second, width: 2)
            text.put("Z")
            return text.count
        }
    }

    /// The moment `text` names, or nil when it is not an RFC 3339 date-time of the form above
    /// with every field in range (a day that exists in its month, hours 00–23, minutes 00–59,
    /// seconds 00–60: a leap second counts as the next minute's first, as Foundation read it).
    public static func date(from text: String) -> Date? {
        guard text.utf8.count >= 20, text.utf8.count <= maxBytes else { return nil }
        var text = text
        return text.withUTF8 { parse($0) }
    }

    private static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        func number(_ at: Int, _ count: Int) -> Int? {
            var value = 0
            for byte in bytes[at..<at + count] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        func byte(_ at: Int, is expected: Character) -> Bool { at < bytes.count && bytes[at] == expected.asciiValue }
        // RFC 3339 §5.6: `T` and `Z` may be written in lower case.
        func letter(_ at: Int, is expected: Character) -> Bool { at < bytes.count && bytes[at] | 0x20 == expected.asciiValue! | 0x20 }
        guard let year = number(0, 4), byte(4, is: "-"), let month = number(5, 2), byte(7, is: "-"),
            let day = number(8, 2), letter(10, is: "T"), let hour = number(11, 2), byte(13, is: ":"),
            let minute = number(14, 2), byte(16, is: ":"), let second = number(17, 2),
            (1...12).contains(month), (1...UTCDateTime.days(inMonth: month, of: year)).contains(day),
            hour <= 23, minute <= 59, second <= 60
        else { return nil }

        var at = 19
        var nanoseconds = 0
        if byte(at, is: ".") {
            at += 1
            let digitsStart = at
            while at < bytes.count, bytes[at] >= UInt8(ascii: "0"), bytes[at] <= UInt8(ascii: "9") { at += 1 }
            let count = at - digitsStart
            guard (1...9).contains(count), let fraction = number(digitsStart, count) else { return nil }
            nanoseconds = fraction
            for _ in count..<9 { nanoseconds *= 10 }
        }

        let offsetSeconds: Int
        if letter(at, is: "Z") {
            offsetSeconds = 0
            at += 1
        } else if byte(at, is: "+") || byte(at, is: "-") {
            guard at + 6 <= bytes.count, let offsetHours = number(at + 1, 2), byte(at + 3, is: ":"),
                let offsetMinutes = number(at + 4, 2), offsetMinutes <= 59, offsetHours * 60 + offsetMinutes <= 18 * 60
            else { return nil }
            offsetSeconds = (offsetHours * 3600 + offsetMinutes * 60) * (byte(at, is: "-") ? -1 : 1)
            at += 6
        } else {
            return nil
        }
        guard at == bytes.count else { return nil }

        let fields = UTCDateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
        let seconds = fields.unixSeconds - Int64(offsetSeconds) - UTCDateTime.referenceDateUnixSeconds
        return Date(timeIntervalSinceReferenceDate: Double(seconds) + Double(nanoseconds) / 1_000_000_000)
    }
}

extension JSONEncoder.DateEncodingStrategy {
    /// Dates as `RFC3339` writes them: the strings `.iso8601` wrote, without ICU. Every JSON the
    /// worker and its CLI write (the fleet's messages, the admin API, `--json` output) uses it.
    public static var rfc3339: Self {
        .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339.string(from: date))
        }
    }
}

extension JSONDecoder.DateDecodingStrategy {
    /// Dates read by `RFC3339`; one that is not RFC 3339 throws `DecodingError.dataCorrupted`, as
    /// `.iso8601` did.
    public static var rfc3339: Self {
        .custom { decoder in
            let container = try decoder.singleValueContainer()
            guard let date = RFC3339.date(from: try container.decode(String.self)) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "Expected date string to be RFC 3339-formatted.")
            }
            return date
        }
    }
}
