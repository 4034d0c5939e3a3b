import Foundation

/// The HTTP `Date` header's form, RFC 9110 §5.6.7 IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
/// By hand for the admin server (`AdminApplication`): Hummingbird formats it with Foundation's
/// `Calendar` and `TimeZone.gmt`, which on Linux are ICU's (`UTCDateTime` says what that costs).
public enum HTTPDate {
    private static let dayNames: [StaticString] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let monthNames: [StaticString] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// `date` as an IMF-fixdate: whole seconds rounded down, years 0000–9999 (a date outside is
    /// written as the nearest end).
    public static func string(from date: Date) -> String {
        let fields = UTCDateTime(date)
        return String(unsafeUninitializedCapacity: 29) { out in
            var text = ASCIIWriter(out)
            text.put(dayNames[fields.weekday])
            text.put(", ")
            text.put(fields.day, width: 2)
            text.put(" ")
            text.put(monthNames[fields.month - 1])
            text.put(" ")
            text.put(fields.year, width: 4)
            text.put(" ")
            text.put(fields.hour, width: 2)
            text.put(":")
            text.put(fields.minute, width: 2)
            text.put(":")
            text.put(fields.second, width: 2)
            text.put(" GMT")
            return text.count
        }
    }
}
