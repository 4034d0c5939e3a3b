/// What the admin server's own `run()` (`AdminApplication`, which replaced Hummingbird's to keep
/// ICU out of the worker) adds to every answer on a real socket: the `Date` header as an RFC 9110
/// IMF-fixdate of the time it answered, and the `Server` name, on a route's answer, the router's
/// error answers and an access check's 401 alike.
import APNSAdmin
import APNSConfig
import Foundation
import Testing
import TestSupport

@Suite struct AdminServerHeaderTests {
    /// `Thu, 01 Jan 1970 00:00:00 GMT`, read with Foundation's formatter (fine in a test).
    static func imfFixdate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard text.utf8.count == 29, let date = formatter.date(from: text), formatter.string(from: date) == text else { return nil }
        return date
    }

    /// The value of each header named `name` in curl's `-D -` output.
    static func values(_ name: String, in headers: String) -> [String] {
        headers.split(separator: "\r\n").compactMap { line in
            guard let colon = line.firstIndex(of: ":"), line[..<colon].lowercased() == name else { return nil }
            return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }

    @Test func everyAnswerCarriesTheDateItWasMadeAndTheServerName() async throws {
        let settings = AdminSettings(listen: ListenAddress(host: "127.0.0.1", port: 0), token: "header-test-token")
        try await AdminAccessTests.serving(settings) { port in
            // The unknown route's status is the access check's or the router's: either way an error answer.
            for (path, status) in [("/health", 200), ("/api/status", 401), ("/no/such/route", nil)] as [(String, Int?)] {
                let before = Date().timeIntervalSince1970.rounded(.down)
                let answer = try await AdminAccessTests.curl(["http://127.0.0.1:\(port)\(path)"])
                let after = Date().timeIntervalSince1970
                #expect(status.map { answer.status == $0 } ?? (answer.status >= 400), "\(path): \(answer.status) \(answer.stderr)")
                let dates = Self.values("date", in: answer.headers)
                #expect(dates.count == 1, "\(path): \(answer.headers)")
                let date = try #require(dates.first.flatMap(Self.imfFixdate), "\(path): \(dates)")
                // Whole seconds: the header's second is the one the answer was made in.
                #expect(date.timeIntervalSince1970 >= before && date.timeIntervalSince1970 <= after, "\(path): \(dates)")
                #expect(Self.values("server", in: answer.headers) == ["apns-worker"], "\(path): \(answer.headers)")
            }
        }
    }
}
