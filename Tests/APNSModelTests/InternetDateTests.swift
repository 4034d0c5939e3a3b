import APNSModel
import Foundation
import SeededRandom
import Testing

/// The hand-made date formats (`RFC3339`, `HTTPDate`, `UTCDateTime`) against Foundation's own
/// (ICU's here, which is fine in a test): the fleet's wire and the `Date` header must not change.
struct InternetDateTests {
    /// Foundation's calendar is Julian before 1582-10-15; from the next year on it and the
    /// proleptic Gregorian calendar agree.
    static let gregorianFrom: Double = -12_212_553_600  // 1583-01-01T00:00:00Z
    static let lastWritable: Double = 253_402_300_799  // 9999-12-31T23:59:59Z

    static func foundationISO8601(_ date: Date) -> String { Date.ISO8601FormatStyle().format(date) }
    static func foundationParse(_ text: String) -> Date? { try? Date(text, strategy: .iso8601) }

    /// Random moments over 1583–9999 and around 1970, plus the edges: fractions round down,
    /// leap days, century years.
    static func moments() -> [Double] {
        var random = SeededGenerator(seed: 3339)
        var moments: [Double] = [
            0, 0.999_999, -0.5, -1, 951_782_400 /* 2000-02-29 */, 4_107_542_400 /* 2100-03-01 */,
            1_800_000_000.7, gregorianFrom, lastWritable, lastWritable + 0.9, 1_709_164_800 /* 2024-02-29 */,
        ]
        for _ in 0..<5_000 { moments.append(Double.random(in: gregorianFrom...lastWritable, using: &random)) }
        for _ in 0..<5_000 { moments.append(Double(Int.random(in: -100_000_000...100_000_000, using: &random)) / 7) }
        return moments
    }

    // MARK: - RFC 3339, written

    @Test func writesTheStringsFoundationsISO8601Wrote() {
        var differing: [Double] = []
        for moment in Self.moments() {
            let date = Date(timeIntervalSince1970: moment)
            if RFC3339.string(from: date) != Self.foundationISO8601(date) { differing.append(moment) }
        }
        #expect(differing.isEmpty, "first: \(differing.prefix(5))")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: 1_800_000_000.7)) == "2027-01-15T08:00:00Z")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59Z")
    }

    @Test func readsBackWhatItWritesToTheSecond() {
        for moment in Self.moments() {
            let date = Date(timeIntervalSince1970: moment)
            let text = RFC3339.string(from: date)
            #expect(RFC3339.date(from: text) == Date(timeIntervalSinceReferenceDate: date.timeIntervalSinceReferenceDate.rounded(.down)), "\(text)")
        }
    }

    @Test func aDateBeyondFourDigitYearsIsWrittenAsTheNearestEnd() {
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: 1e12)) == "9999-12-31T23:59:59Z")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: -1e12)) == "0000-01-01T00:00:00Z")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: .infinity)) == "9999-12-31T23:59:59Z")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: -.infinity)) == "0000-01-01T00:00:00Z")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: .nan)) == "0000-01-01T00:00:00Z")
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: .greatestFiniteMagnitude)) == "9999-12-31T23:59:59Z")
        // What it writes it reads.
        #expect(RFC3339.date(from: "0000-01-01T00:00:00Z") == Date(timeIntervalSince1970: -62_167_219_200))
        // Year 0000 ahead of UTC is a moment of year -1: read as that, written as the earliest
        // (FuzzRFC3339 found its oracle missing this end).
        let early = RFC3339.date(from: "0000-01-01T00:00:12+18:00")
        #expect(early == Date(timeIntervalSince1970: -62_167_219_200 + 12 - 18 * 3600))
        #expect(early.map(RFC3339.string(from:)) == "0000-01-01T00:00:00Z")
    }

    // MARK: - RFC 3339, read

    /// Each accepted form, with the moment it names, and the same moment from Foundation's parser.
    @Test(arguments: [
        ("2026-11-27T08:57:25Z", 1_795_769_845.0),
        ("2024-01-01T00:00:00.5Z", 1_704_067_200.5),
        ("2024-01-01T00:00:00.123Z", 1_704_067_200.123),
        ("2024-01-01T00:00:00.123456789Z", 1_704_067_200.123_456_789),
        ("2024-01-01T00:00:00.000000001Z", 1_704_067_200.000_000_001),
        ("2024-01-01T01:30:00+01:30", 1_704_067_200),
        ("2023-12-31T22:30:00.25-01:30", 1_704_067_200.25),
        ("2024-01-01T00:00:00-00:00", 1_704_067_200),
        ("2024-01-01T18:00:00+18:00", 1_704_067_200),
        ("2023-12-31T06:00:00-18:00", 1_704_067_200),
        ("2024-02-29T12:00:00Z", 1_709_208_000),
        ("2000-02-29T00:00:00Z", 951_782_400),
        ("2016-12-31T23:59:60Z", 1_483_228_800),  // a leap second: the next minute's first, as Foundation read it
        ("9999-12-31T23:59:59Z", 253_402_300_799),
        ("1970-01-01T00:00:00Z", 0),
    ])
    func readsRFC3339DateTimes(text: String, unixSeconds: Double) throws {
        let date = try #require(RFC3339.date(from: text))
        #expect(abs(date.timeIntervalSince1970 - unixSeconds) < 1e-6)
        let foundations = try #require(Self.foundationParse(text), "Foundation's decoder accepted it too")
        #expect(abs(date.timeIntervalSince(foundations)) < 1e-6)
    }

    /// RFC 3339 §5.6 lets `T` and `Z` be written in lower case (and the schemas say so): read as
    /// the upper-case forms are.
    @Test(arguments: ["2024-01-01t00:00:00z", "2024-01-01t00:00:00Z", "2024-01-01T00:00:00z", "2024-01-01t01:30:00.000+01:30"])
    func readsLowerCaseTAndZ(text: String) {
        #expect(RFC3339.date(from: text) == Date(timeIntervalSince1970: 1_704_067_200))
    }

    @Test(arguments: [
        "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2024-02-30T00:00:00Z", "2024-04-31T00:00:00Z", "2024-01-32T00:00:00Z",
        "2024-00-01T00:00:00Z", "2024-13-01T00:00:00Z", "2024-01-00T00:00:00Z",
    ])
    func rejectsDaysThatDoNotExist(text: String) {
        // Foundation's decoder rolled the first three over into March or May; a real instance
        // never writes them.
        #expect(RFC3339.date(from: text) == nil)
    }

    @Test(arguments: [
        "2024-01-01T24:00:00Z", "2024-01-01T23:60:00Z", "2024-01-01T23:59:61Z", "2024-01-01T99:99:99Z",
        "2024-01-01T00:00:00+18:01", "2024-01-01T00:00:00-19:00", "2024-01-01T00:00:00+24:00", "2024-01-01T00:00:00+01:60",
    ])
    func rejectsFieldsOutOfRange(text: String) {
        #expect(RFC3339.date(from: text) == nil)
    }

    @Test(arguments: [
        "", "2024", "2024-01-01", "2024-01-01T00:00:00", "2024-01-01T00:00Z", "2024-1-1T1:2:3Z", "20240101T000000Z",
        "2024-01-01 00:00:00Z", "2024-01-01T00:00:00 Z", "2024-01-01T00:00:00.Z",
        "2024-01-01T00:00:00,5Z", "2024-01-01T00:00:00.1234567891Z", "2024-01-01T00:00:00+01", "2024-01-01T00:00:00+0100",
        "2024-01-01T00:00:00+01:00:30", "2024-01-01T00:00:00GMT", "2024-01-01T00:00:00UTC+1", "2024-01-01T00:00:00Zgarbage",
        " 2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z\n", "+2024-01-01T00:00:00Z", "-2024-01-01T00:00:00Z",
        "2024-01-01T00:00:00+-1:00", "2024-01-01T00:00:00.-5Z",
    ])
    func rejectsOtherForms(text: String) {
        #expect(RFC3339.date(from: text) == nil)
    }

    @Test func rejectsHugeNumbers() {
        #expect(RFC3339.date(from: "99999999999999999999-01-01T00:00:00Z") == nil)
        #expect(RFC3339.date(from: "10000-01-01T00:00:00Z") == nil)
        #expect(RFC3339.date(from: "2024-01-01T00:00:00." + String(repeating: "9", count: 30) + "Z") == nil)
        #expect(RFC3339.date(from: "2024-01-01T00:00:00.999999999Z") != nil)
        #expect(RFC3339.date(from: "2024-01-01T00:00:00Z" + String(repeating: " ", count: 1 << 20)) == nil)
        #expect(RFC3339.date(from: "2024-99999999999999999999-01T00:00:00Z") == nil)
    }

    @Test func rejectsNonASCII() {
        for text in [
            "２０２４-01-01T00:00:00Z",  // full-width digits
            "٢٠٢٤-01-01T00:00:00Z",  // Arabic-Indic digits
            "2024-01-01T00:00:00Z\u{301}",  // a combining accent on the Z
            "2024‐01‐01T00:00:00Z",  // U+2010 hyphens
            "2024-01-01T00:00:00\u{0}Z", "2024-01-01T00:00:00Ｚ", "2024-01-01T00:00:00.５Z", "\u{FEFF}2024-01-01T00:00:00Z",
        ] {
            #expect(RFC3339.date(from: text) == nil, "\(text)")
        }
    }

    // MARK: - JSON

    /// `.rfc3339`, the strategy of every JSON the worker and its CLI write: the bytes of the
    /// `.iso8601` strategy it replaced, in any output form, and a date it cannot read fails as
    /// `.iso8601`'s did.
    @Test func theJSONStrategiesAreTheISO8601Ones() throws {
        struct Dated: Codable, Equatable {
            var at: Date
            var maybe: Date?
            var list: [Date]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .rfc3339
        let iso8601 = JSONEncoder()
        iso8601.outputFormatting = encoder.outputFormatting
        iso8601.dateEncodingStrategy = .iso8601
        let moments = Self.moments()
        for index in stride(from: 0, to: moments.count - 2, by: 3) {
            let dated = Dated(
                at: Date(timeIntervalSince1970: moments[index]), maybe: index % 2 == 0 ? nil : Date(timeIntervalSince1970: moments[index + 1]),
                list: [Date(timeIntervalSince1970: moments[index + 2])])
            #expect(try encoder.encode(dated) == iso8601.encode(dated), "\(moments[index])")
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .rfc3339
        let read = try decoder.decode(Dated.self, from: Data(#"{"at":"2024-01-01T00:00:00.5Z","list":["2024-01-01T01:30:00+01:30"]}"#.utf8))
        #expect(read == Dated(at: Date(timeIntervalSince1970: 1_704_067_200.5), maybe: nil, list: [Date(timeIntervalSince1970: 1_704_067_200)]))
        #expect {
            try decoder.decode(Dated.self, from: Data(#"{"at":"2024-02-30T00:00:00Z","list":[]}"#.utf8))
        } throws: { error in
            guard case DecodingError.dataCorrupted = error else { return false }
            return true
        }
    }

    // MARK: - HTTP date

    @Test func writesIMFFixdates() {
        #expect(HTTPDate.string(from: Date(timeIntervalSince1970: 0)) == "Thu, 01 Jan 1970 00:00:00 GMT")
        // RFC 9110 §5.6.7's own example.
        #expect(HTTPDate.string(from: Date(timeIntervalSince1970: 784_111_777)) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.string(from: Date(timeIntervalSince1970: 951_868_799.9)) == "Tue, 29 Feb 2000 23:59:59 GMT")
        #expect(HTTPDate.string(from: Date(timeIntervalSince1970: -1)) == "Wed, 31 Dec 1969 23:59:59 GMT")
        #expect(HTTPDate.string(from: Date(timeIntervalSince1970: 1e12)) == "Fri, 31 Dec 9999 23:59:59 GMT")
    }

    @Test func writesTheDatesFoundationsFormatterWrites() {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        var differing: [Double] = []
        for moment in Self.moments() {
            let date = Date(timeIntervalSince1970: moment)
            // Whole seconds: the formatter rounds to its millisecond first (0.9999995 s is
            // 00:00:01 to it), where Hummingbird's `Calendar` fields rounded down, as we do.
            let second = Date(timeIntervalSinceReferenceDate: date.timeIntervalSinceReferenceDate.rounded(.down))
            if HTTPDate.string(from: date) != formatter.string(from: second) { differing.append(moment) }
        }
        #expect(differing.isEmpty, "first: \(differing.prefix(5))")
    }

    // MARK: - Calendar fields

    @Test func weekdaysAndLeapYears() {
        #expect(UTCDateTime(unixSeconds: 0).weekday == 4)  // Thursday
        #expect(UTCDateTime(unixSeconds: -86_400).weekday == 3)
        #expect(UTCDateTime(unixSeconds: 3 * 86_400).weekday == 0)  // Sunday
        #expect(UTCDateTime.isLeapYear(2000) && UTCDateTime.isLeapYear(2024) && UTCDateTime.isLeapYear(0))
        #expect(!UTCDateTime.isLeapYear(1900) && !UTCDateTime.isLeapYear(2100) && !UTCDateTime.isLeapYear(2023))
        #expect(UTCDateTime.days(inMonth: 2, of: 2024) == 29 && UTCDateTime.days(inMonth: 2, of: 2100) == 28)
        #expect(UTCDateTime.days(inMonth: 13, of: 2024) == 0 && UTCDateTime.days(inMonth: 0, of: 2024) == 0)
    }

    @Test func fieldsAndSecondsAgreeOverTwoGregorianCycles() {
        // 400 years either side of 1970, a moment about every day (the step moves through the
        // hours too): seconds to fields and back, and every field a real one.
        var wrong: [Int64] = []
        var seconds: Int64 = -146_097 * 86_400
        while seconds < 146_097 * 86_400 {
            let fields = UTCDateTime(unixSeconds: seconds)
            if fields.unixSeconds != seconds || !(1...UTCDateTime.days(inMonth: fields.month, of: fields.year)).contains(fields.day)
                || !(0...23).contains(fields.hour) || !(0...59).contains(fields.minute) || !(0...59).contains(fields.second)
            {
                wrong.append(seconds)
            }
            seconds += 86_400 + 3_661
        }
        #expect(wrong.isEmpty, "first: \(wrong.prefix(5))")
    }
}
